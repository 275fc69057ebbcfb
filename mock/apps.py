from django.apps import AppConfig


class MockConfig(AppConfig):
    name = "mock"
    verbose_name = "Mock interviews"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from common import learner_data
        from mock import learner_data as mock_learner_data

        learner_data.register(
            "mock",
            redis_keys=mock_learner_data.redis_keys,
            sections={
                "scorecards": mock_learner_data.scorecards,
                "interviewer_notes": mock_learner_data.interviewer_notes,
            },
        )
