"""The Celery app: one Redis broker, queues `default`, `lab-cpu` and `lab-gpu`.

A GPU node joins by running `celery -A trainer worker -Q lab-gpu --pool=solo -c 1`
(CUDA must not be initialised before a fork). See docs/OPERATIONS.md.

Project wiring: it imports nothing of the apps. Their tasks are found by autodiscovery and
declared with @shared_task; the lab adds its worker step from lab/tasks.py (worker_init).
"""

import os

from celery import Celery
from kombu import Exchange, Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")

app = Celery("trainer")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(
    Queue(name, Exchange(name, type="direct"), routing_key=name)
    for name in ("default", "lab-cpu", "lab-gpu")
)
app.autodiscover_tasks()
