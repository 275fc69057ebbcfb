"""The Celery app: one Redis broker, queues `default`, `lab-cpu` and `lab-gpu`.

A GPU node joins by running `celery -A trainer worker -Q lab-gpu --pool=solo -c 1`
(CUDA must not be initialised before a fork). See docs/OPERATIONS.md.
"""

import logging
import os

from celery import Celery, bootsteps
from kombu import Exchange, Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")

app = Celery("trainer")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(
    Queue(name, Exchange(name, type="direct"), routing_key=name)
    for name in ("default", "lab-cpu", "lab-gpu")
)
app.autodiscover_tasks()

log = logging.getLogger(__name__)


class RequeueLostLabRuns(bootsteps.StartStopStep):
    """The DB is the source of truth for lab runs, Redis keeps nothing on disk: each time a
    worker (re)connects to the broker, and every LAB_REQUEUE_EVERY_S while connected, queued
    runs whose message the broker no longer holds are sent again
    (lab.services.requeue_lost_runs). Errors are logged, never raised into the consumer."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent, **kwargs):
        self.tref = None
        super().__init__(parent, **kwargs)

    def start(self, consumer):
        from django.conf import settings

        self.requeue()
        every = getattr(settings, "LAB_REQUEUE_EVERY_S", 60)
        if every and consumer.timer is not None:
            self.tref = consumer.timer.call_repeatedly(every, self.requeue)

    def stop(self, consumer):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    shutdown = stop

    def requeue(self):
        from django.db import close_old_connections

        try:
            from lab.services import requeue_lost_runs

            sent = requeue_lost_runs()
            if sent:
                log.warning("lab runs queued again (their message was lost): %s", sent)
        except Exception as exc:  # the broker or the DB is down: the next start retries
            log.warning("could not check for lost lab-run messages: %s", exc)
        finally:
            close_old_connections()


app.steps["consumer"].add(RequeueLostLabRuns)
