"""WSGI entry point; prefer ASGI (trainer.asgi), which the lab's live streams need."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")

application = get_wsgi_application()
