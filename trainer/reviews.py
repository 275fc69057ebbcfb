"""Spaced repetition with fsrs: each (learner, question) is a card; a graded attempt is a
review whose rating comes from the score."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from fsrs import Card, Rating, Scheduler

from questions.models import published_q
from trainer.models import Attempt, ReviewCard, ReviewLog

# No fuzzing: the same history gives the same schedule (reproducible, testable).
SCHEDULER = Scheduler(enable_fuzzing=False)
MAX_REVIEW_SECONDS = 3600


def rating_for(attempt: Attempt) -> Rating:
    """Again < 40% ≤ Hard < 70% ≤ Good < 90% ≤ Easy, on the help-adjusted score.

    Arithmetic: a step that needed follow-through credit counts half, and any hint caps
    the rating at Good (the learner did not recall it unaided).
    """
    score = attempt.score or 0.0
    helped = False
    answers = list(attempt.step_answers.all()) if attempt.pk else []
    if answers:
        steps = attempt.result.get("steps") or len(answers)
        credits = [a.credit * (0.5 if a.verdict == "follow_through" else 1.0) for a in answers]
        score = sum(credits) / steps
        helped = any(a.hints_used for a in answers)
    if score < 0.4:
        return Rating.Again
    if score < 0.7:
        return Rating.Hard
    if score < 0.9 or helped:
        return Rating.Good
    return Rating.Easy


@transaction.atomic
def review_record(*, attempt: Attempt, now: datetime | None = None) -> ReviewLog:
    """Schedule the attempt's question for the learner from this graded attempt."""
    now = now or timezone.now()
    card_row, _ = ReviewCard.objects.select_for_update().get_or_create(
        user=attempt.user,
        question=attempt.question,
        defaults={"card": Card().to_dict(), "due": now},
    )
    duration = int(((attempt.submitted or now) - attempt.started).total_seconds())
    duration = max(0, min(duration, MAX_REVIEW_SECONDS))
    rating = rating_for(attempt)
    card, _log = SCHEDULER.review_card(
        Card.from_dict(card_row.card), rating, review_datetime=now, review_duration=duration * 1000
    )
    card_row.card = card.to_dict()
    card_row.due = card.due
    card_row.reviews += 1
    card_row.save()
    return ReviewLog.objects.create(
        card=card_row,
        attempt=attempt,
        rating=int(rating),
        reviewed=now,
        duration_s=duration,
        next_due=card.due,
    )


def due_cards(user, now: datetime | None = None) -> QuerySet[ReviewCard]:
    """The learner's cards due now, most overdue first (published questions only)."""
    return (
        ReviewCard.objects.filter(
            published_q("question__"), user=user, due__lte=now or timezone.now()
        )
        .select_related("question")
        .order_by("due")
    )
