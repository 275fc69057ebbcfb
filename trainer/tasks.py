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


@shared_task(name="trainer.tasks.judge_attempt", bind=True, acks_late=True)
def judge_attempt(self, attempt_id: int) -> dict[str, object]:
    """Ask the configured judge about the unclear points of a graded answer and fold its
    verdicts in (trainer/grading/judge.py). Retries a failed call RUBRIC_JUDGE_RETRIES times;
    after that the offline verdicts stand and the result says why."""
    from django.conf import settings

    from trainer.grading import judge
    from trainer.judging import judge_inputs, store_judge_failure, store_judge_verdicts

    config = judge.JudgeConfig.from_settings()
    if config is None:
        return {"status": "off"}
    inputs = judge_inputs(attempt_id)
    if inputs is None:
        return {"status": "nothing to judge"}
    prompt, points, answer = inputs
    try:
        verdicts = judge.judge_all(config, prompt, points, answer)
    except judge.JudgeError as exc:
        if self.request.retries < settings.RUBRIC_JUDGE_RETRIES:
            raise self.retry(exc=exc, countdown=min(30, 2**self.request.retries)) from None
        store_judge_failure(attempt_id, str(exc))
        return {"status": "failed", "error": str(exc)}
    store_judge_verdicts(attempt_id, verdicts, config.model)
    return {"status": "done", "points": len(verdicts)}
