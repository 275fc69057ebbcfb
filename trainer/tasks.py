"""Web-side Celery tasks (queue `default`)."""

from __future__ import annotations

import socket

from celery import shared_task

from questions.models import Topic


@shared_task(name="trainer.tasks.diagnostics_roundtrip")
def diagnostics_roundtrip(nonce: str) -> dict[str, object]:
    """Echo a nonce with the worker's host and what it sees in the database.

    Used by `/healthz?deep=1` and the integration tests to prove the whole path: broker,
    worker, database, result backend.
    """
    return {"nonce": nonce, "host": socket.gethostname(), "topics": Topic.objects.count()}
