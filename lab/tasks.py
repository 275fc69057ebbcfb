"""Celery tasks for lab runs. The task only fetches the run by id and calls the service:
everything else (status, points, streaming, cancel, errors) lives in lab/services.py."""

from __future__ import annotations

from celery import shared_task

from lab import services


@shared_task(bind=True, name="lab.tasks.run_lab_cpu", acks_late=True)
def run_lab_cpu(self, run_id: int) -> str:
    return services.execute_run(run_id, self.request.hostname or "")


@shared_task(bind=True, name="lab.tasks.run_lab_gpu", acks_late=True)
def run_lab_gpu(self, run_id: int) -> str:
    return services.execute_run(run_id, self.request.hostname or "")
