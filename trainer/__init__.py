"""The Django project and the practice side of the trainer."""

from .celery import app as celery_app

__all__ = ("celery_app",)
