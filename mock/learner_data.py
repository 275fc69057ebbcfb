"""The mock's part of a learner's data beyond its rows (registered in MockConfig.ready()):
each mock's live stream in Redis, dropped with the account, and two export sections —
the scorecard of each of the learner's mocks, and what they wrote as someone else's
interviewer."""

from __future__ import annotations

import logging
from typing import Any

from mock import live
from mock.models import MockInterview, MockItem
from mock.scorecard import scorecard

log = logging.getLogger(__name__)


def redis_keys(user) -> list[str]:
    return [
        live.key(pk) for pk in MockInterview.objects.filter(user=user).values_list("pk", flat=True)
    ]


def scorecards(user) -> list[dict[str, Any]]:
    """The scorecard of each of the learner's mocks as the site shows it (computed from the
    rows; included so the export reads without the site)."""
    cards = []
    for mock in MockInterview.objects.filter(user=user).select_related("loop").order_by("pk"):
        try:
            card = scorecard(mock)
        except Exception as exc:  # one broken card must not cost the learner the export
            log.exception("scorecard of mock %s failed", mock.pk)
            cards.append({"mock": mock.pk, "error": f"{type(exc).__name__}: {exc}"})
            continue
        cards.append(
            {
                "mock": mock.pk,
                "loop": mock.loop.slug,
                "status": mock.status,
                "overall_auto": card.overall_auto,
                "overall_interviewer": card.overall_interviewer,
                "verdict": card.verdict,
                "used_s": card.used_s,
                "budget_s": card.budget_s,
                "competencies": [
                    {"name": c.name, "auto": c.auto, "interviewer": c.interviewer}
                    for c in card.competencies
                ],
                "items": [
                    {
                        "order": c.item.order,
                        "question": c.question.slug,
                        "reached": c.reached,
                        "used_s": c.used_s,
                        "auto": c.auto,
                        "raw": c.raw,
                        "interviewer": c.interviewer,
                        "interviewer_notes": c.item.interviewer_notes,
                    }
                    for c in card.items
                ],
                "weakest": [w.name for w in card.weakest],
            }
        )
    return cards


def interviewer_notes(user) -> list[dict[str, Any]]:
    """What this user wrote as the interviewer of someone else's mock (that mock stays
    with its candidate; only the marks are the interviewer's words)."""
    items = MockItem.objects.filter(mock__interviewer=user).exclude(mock__user=user)
    return [
        {
            "mock": item.mock_id,
            "order": item.order,
            "interviewer_points": item.interviewer_points,
            "interviewer_notes": item.interviewer_notes,
            "interviewer_score": item.interviewer_score,
        }
        for item in items.order_by("mock_id", "order")
    ]
