"""Objections to verdicts (writes and the export): a learner says "this verdict is wrong"
on one point; staff accept or reject it, and an accepted one on a main answer becomes a
labelled answer in the evaluation set's format (tests/data/rubric_eval, contract §4)."""

from __future__ import annotations

from collections.abc import Iterable

from questions.services import dump_yaml
from trainer.models import Attempt, FollowUpResponse, VerdictObjection
from trainer.rescore import verdict_of

NOTE_MAX_CHARS = 2_000
OBJECTIONS_PER_POINT = 3  # a learner may restate an objection, not flood the queue


class ObjectionRefused(Exception):
    """An objection the request cannot make (no such point, or too many already)."""


def _result_of(attempt: Attempt, follow_up: int | None) -> dict:
    if follow_up is None:
        return attempt.result or {}
    row = FollowUpResponse.objects.filter(attempt=attempt, index=follow_up).first()
    return row.result if row is not None and row.submitted else {}


def objection_create(
    *, attempt: Attempt, point_index: int, note: str, follow_up: int | None = None
) -> VerdictObjection:
    """Store the learner's objection to the point's current verdict, with the versions
    that produced it (so authors know which grader and rubric were wrong)."""
    result = _result_of(attempt, follow_up)
    point = next(
        (p for i, p in enumerate(result.get("points", [])) if p.get("index", i) == point_index),
        None,
    )
    if point is None:
        raise ObjectionRefused("That answer has no graded point with this number.")
    mine = VerdictObjection.objects.filter(
        attempt=attempt, follow_up=follow_up, point_index=point_index
    )
    if mine.count() >= OBJECTIONS_PER_POINT:
        raise ObjectionRefused(
            "You have already objected to this verdict; the authors will see it."
        )
    return VerdictObjection.objects.create(
        attempt=attempt,
        follow_up=follow_up,
        point_index=point_index,
        verdict=verdict_of(point),
        rubric_version=str(point.get("rubric_version", ""))[:32],
        grader_version=str(result.get("grader_version", ""))[:32],
        note=note.strip()[:NOTE_MAX_CHARS],
    )


def corrected_verdict(objection: VerdictObjection) -> str:
    """The verdict staff say is right (their choice, else the opposite of the one objected
    to: a hit was wrong -> missed, anything else -> hit)."""
    if objection.correct_verdict:
        return objection.correct_verdict
    return "missed" if objection.verdict == "hit" else "hit"


def labelled_answer(objections: list[VerdictObjection]) -> dict:
    """One attempt's answer as an evaluation entry: the points credited and contradicted
    by its stored verdicts, each objected point set to its corrected verdict."""
    attempt = objections[0].attempt
    verdicts = {
        p.get("index", i): verdict_of(p)
        for i, p in enumerate((attempt.result or {}).get("points", []))
    }
    for o in objections:
        verdicts[o.point_index] = corrected_verdict(o)
    label = next((o.staff_label for o in objections if o.staff_label), "partial")
    entry: dict = {
        "label": label,
        "text": attempt.answer.rstrip("\n") + "\n",  # written as a `text: |` block
        "points": sorted(i for i, v in verdicts.items() if v == "hit"),
    }
    contradicts = sorted(i for i, v in verdicts.items() if v == "contradicted")
    if contradicts:
        entry["contradicts"] = contradicts
    return entry


def export_yaml(objections: Iterable[VerdictObjection]) -> str:
    """Accepted main-answer objections in the rubric_eval file format, grouped by question
    slug, one answer per attempt (its accepted objections applied together)."""
    by_attempt: dict[int, list[VerdictObjection]] = {}
    for o in objections:
        if o.status == VerdictObjection.Status.ACCEPTED and o.follow_up is None:
            by_attempt.setdefault(o.attempt_id, []).append(o)
    by_slug: dict[str, list[dict]] = {}
    for group in by_attempt.values():
        by_slug.setdefault(group[0].attempt.question.slug, []).append(labelled_answer(group))
    questions = [{"slug": slug, "answers": answers} for slug, answers in sorted(by_slug.items())]
    return dump_yaml({"questions": questions})


def objections_section(user) -> list[dict]:
    """The learner's objections as they read them (for the data export; the rows go too)."""
    rows = VerdictObjection.objects.filter(attempt__user=user).select_related("attempt__question")
    return [
        {
            "question": o.attempt.question.slug,
            "attempt": o.attempt_id,
            "follow_up": o.follow_up,
            "point": o.point_index,
            "verdict": o.verdict,
            "note": o.note,
            "status": o.status,
            "created": o.created.isoformat(),
        }
        for o in rows.order_by("created")
    ]
