"""Celery tasks for lab runs. The task only fetches the run by id and calls the service:
everything else (status, points, streaming, cancel, errors) lives in lab/services.py."""

from __future__ import annotations

import socket

from celery import shared_task
from celery.exceptions import TimeLimitExceeded, WorkerLostError
from celery.signals import task_failure, worker_init

from lab import services

_NODE = {"name": ""}  # this worker's node name (e.g. celery@gpu-3); inherited by forks


@worker_init.connect
def _remember_node_name(sender=None, **kwargs) -> None:
    _NODE["name"] = getattr(sender, "hostname", "") or ""


def _node(task) -> str:
    return _NODE["name"] or task.request.hostname or socket.gethostname()


@shared_task(bind=True, name="lab.tasks.run_lab_cpu", acks_late=True)
def run_lab_cpu(self, run_id: int) -> str:
    return services.execute_run(run_id, _node(self), task_id=self.request.id)


@shared_task(bind=True, name="lab.tasks.run_lab_gpu", acks_late=True)
def run_lab_gpu(self, run_id: int) -> str:
    return services.execute_run(run_id, _node(self), task_id=self.request.id)


@task_failure.connect
def _fail_run_whose_process_died(sender=None, task_id=None, exception=None, args=None, **kw):
    """In the worker's main process: the pool process running a lab died (OOM killer,
    SIGKILL, crash) or was stopped at the hard time limit. Celery acknowledges the message
    (late ack, no reject on worker lost: it is not run again) and the run is failed now."""
    if getattr(sender, "name", "") not in (run_lab_cpu.name, run_lab_gpu.name) or not args:
        return
    if isinstance(exception, WorkerLostError):
        node = _NODE["name"] or "its worker"
        reason = (
            f"The process running this lab on {node} died ({exception}); most often it ran "
            "out of memory or was killed."
        )
    elif isinstance(exception, TimeLimitExceeded):
        reason = "It was stopped at the hard time limit without finishing."
    else:
        return
    from django.db import close_old_connections

    try:
        services.fail_lost_run(args[0], task_id, reason)
    finally:
        close_old_connections()
