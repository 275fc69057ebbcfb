"""The judge's database side: what to ask it about an attempt, and storing its answers.

`trainer.grading.judge` talks to the endpoint (no database); `trainer.tasks.judge_attempt`
runs it on the Celery `default` queue; this module reads and writes the attempt, under a row
lock, so a check the learner answers meanwhile is never overwritten.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from trainer.grading import judge
from trainer.models import Attempt

FAILED_MESSAGE = "The second opinion could not be reached ({error}); the offline verdicts stand."


def request_judge(attempt: Attempt) -> None:
    """After grading: when a judge is configured and some points are unclear, mark the
    result pending and queue the task once the transaction commits. A broker that refuses
    the message leaves the offline verdicts, with a note saying so."""
    if judge.JudgeConfig.from_settings() is None:
        return
    pending = len(judge.pending_points(attempt.result))
    if not pending:
        return
    attempt.result = attempt.result | {
        "judge": {"status": "pending", "since": timezone.now().isoformat(), "points": pending}
    }
    attempt.save(update_fields=["result"])
    attempt_id = attempt.pk

    def send() -> None:
        from trainer.tasks import judge_attempt

        try:
            judge_attempt.apply_async((attempt_id,), queue="default")
        except Exception as exc:  # broker down: the page must not hang on "pending"
            store_judge_failure(attempt_id, f"the task queue is unavailable: {type(exc).__name__}")

    transaction.on_commit(send)


def judge_inputs(attempt_id: int) -> tuple[str, list[dict], str] | None:
    """(question prompt, the unclear points with their claims, the answer), or None."""
    attempt = Attempt.objects.select_related("question").filter(pk=attempt_id).first()
    if attempt is None or not attempt.result:
        return None
    pending = judge.pending_points(attempt.result)
    if not pending:
        return None
    rubric = list(attempt.question.rubric.all())
    points = []
    for p in pending:
        i = p["index"]
        if i >= len(rubric):
            continue
        row = rubric[i]
        points.append(
            {
                "index": i,
                "text": row.text,
                "claims": list(getattr(row, "claims", []) or []),
                "contradictions": list(getattr(row, "contradictions", []) or []),
            }
        )
    return (attempt.question.prompt, points, attempt.answer) if points else None


def store_judge_verdicts(attempt_id: int, verdicts, model: str) -> None:
    from trainer.grading.rubric import rescore

    with transaction.atomic():
        attempt = Attempt.objects.select_for_update().get(pk=attempt_id)
        result = judge.apply_verdicts(attempt.result, verdicts, rescore, model)
        attempt.result = result
        attempt.score = result["score"]
        attempt.save(update_fields=["result", "score"])


def store_judge_failure(attempt_id: int, error: str) -> None:
    with transaction.atomic():
        attempt = Attempt.objects.select_for_update().filter(pk=attempt_id).first()
        if attempt is None:
            return
        attempt.result = attempt.result | {
            "judge": {"status": "failed", "error": FAILED_MESSAGE.format(error=error)}
        }
        attempt.save(update_fields=["result"])


def judge_state(result: dict) -> dict | None:
    """What the feedback page says about the judge: None when none was asked, else its
    status (pending / done / failed / late) and a sentence. A pending judge that should
    have answered by now (every try timed out, plus a minute) is `late`: the page stops
    waiting and says the offline verdicts stand."""
    state = (result or {}).get("judge")
    if not state:
        return None
    status = state.get("status")
    if status == "done":
        return {
            "status": "done",
            "text": f"Second opinion: {state.get('model', 'the judge')} "
            f"answered on {state.get('points', 0)} unclear point(s).",
        }
    if status == "failed":
        return {"status": "failed", "text": state.get("error", "The second opinion failed.")}
    budget = settings.RUBRIC_JUDGE_TIMEOUT_S * max(1, state.get("points", 1))
    budget = budget * (settings.RUBRIC_JUDGE_RETRIES + 1) + 60
    try:
        since = datetime.fromisoformat(state["since"])
    except (KeyError, TypeError, ValueError):
        since = None
    if since is not None and (timezone.now() - since).total_seconds() > budget:
        return {
            "status": "late",
            "text": "The second opinion has not answered; the offline verdicts stand.",
        }
    return {
        "status": "pending",
        "text": "Asking a second opinion (a judge model) about the "
        "unclear points; this updates by itself.",
    }
