"""ASGI entry point (uvicorn): the lab's SSE streams need an async server."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")

application = get_asgi_application()
