from django.apps import AppConfig


class MockConfig(AppConfig):
    name = "mock"
    verbose_name = "Mock interviews"
    default_auto_field = "django.db.models.BigAutoField"
