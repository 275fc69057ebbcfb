"""Celery tasks for lab runs. The task only fetches the run by id and calls the service:
everything else (status, points, streaming, cancel, errors) lives in lab/services.py."""

from __future__ import annotations

import socket

from celery import shared_task
from celery.signals import worker_init

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
