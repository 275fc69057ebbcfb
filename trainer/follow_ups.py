"""Follow-up answers in practice (writes): after the main answer, each follow-up that has
its own rubric gets an optional answer box, autosaved like the main answer and graded with
the same rubric grader on the follow-up's points."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from trainer.models import Attempt, FollowUpResponse

ANSWER_MAX_CHARS = 20_000  # as the main answer (trainer.services.ANSWER_MAX_CHARS)


class FollowUpError(Exception):
    """A follow-up the request cannot use (none at that index, no rubric, not yet open)."""


def rubric_points(question, index: int) -> list:
    """The grader's Point for each rubric point of follow-up `index` (numbers evaluated
    against the question's variables)."""
    from trainer.grading.rubric import Point

    points = []
    for i in range(len(question.follow_up_items()[index]["rubric"])):
        data = question.follow_up_point(index, i)
        data.pop("check", None)  # follow-ups offer no checks: the answer box is the probe
        points.append(Point.from_dict(data))
    return points


def follow_up_grade(question, index: int, answer: str) -> tuple[float, dict]:
    """(score, stored result) of `answer` to follow-up `index` of `question`."""
    from trainer.grading.rubric import grade

    prompt = question.follow_up_items()[index]["prompt"]
    result = grade(answer, rubric_points(question, index), prompt)
    return result.score, result.as_dict()


def _response(attempt: Attempt, index: int) -> FollowUpResponse:
    items = attempt.question.follow_up_items()
    if attempt.submitted is None:
        raise FollowUpError("Answer the question first; its follow-ups open after that.")
    if not 0 <= index < len(items) or not items[index].get("rubric"):
        raise FollowUpError("This question has no such follow-up to answer.")
    row, _ = FollowUpResponse.objects.get_or_create(
        attempt=attempt, index=index, defaults={"prompt": items[index]["prompt"]}
    )
    return row


def follow_up_draft_save(*, attempt: Attempt, index: int, text: str) -> FollowUpResponse:
    """Autosave a follow-up's box (until it is submitted)."""
    row = _response(attempt, index)
    if row.submitted is None:
        row.draft, row.draft_saved = text[:ANSWER_MAX_CHARS], timezone.now()
        row.save(update_fields=["draft", "draft_saved"])
    return row


def follow_up_submit(*, attempt: Attempt, index: int, text: str) -> FollowUpResponse:
    """Store and grade a follow-up answer; the first submitted answer is kept."""
    with transaction.atomic():
        row = _response(attempt, index)
        row = FollowUpResponse.objects.select_for_update().get(pk=row.pk)
        if row.submitted is not None:
            return row
        row.answer = row.draft = text[:ANSWER_MAX_CHARS]
        row.submitted = timezone.now()
        row.score, row.result = follow_up_grade(attempt.question, index, row.answer)
        row.save()
    return row


def follow_up_rows(attempt: Attempt) -> list[dict]:
    """Every follow-up of the attempt's question with its prompt, rubric and response."""
    responses = {r.index: r for r in attempt.follow_up_responses.all()}
    return [
        {
            "index": i,
            "prompt": item["prompt"],
            "rubric": item.get("rubric") or [],
            "response": responses.get(i),
        }
        for i, item in enumerate(attempt.question.follow_up_items())
    ]
