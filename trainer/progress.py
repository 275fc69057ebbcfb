"""A learner's progress, computed from their graded attempts and review cards."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db.models import Avg, Count, Q
from django.utils import timezone

from questions.models import COMPETENCIES, Question, Topic, published_q
from trainer.models import Attempt, ReviewCard


def graded_attempts(user):
    """The learner's graded attempts on questions a learner may see (published)."""
    return Attempt.objects.filter(
        published_q("question__"), user=user, score__isnull=False, submitted__isnull=False
    )


def topic_progress(user) -> dict[int, dict]:
    """Per topic id: questions attempted, published total, mean of each question's best score."""
    totals = dict(
        Topic.objects.annotate(n=Count("questions", filter=published_q("questions__"))).values_list(
            "id", "n"
        )
    )
    best: dict[tuple[int, int], float] = {}
    for topic_id, question_id, score in graded_attempts(user).values_list(
        "question__topic_id", "question_id", "score"
    ):
        key = (topic_id, question_id)
        best[key] = max(best.get(key, 0.0), score)
    out: dict[int, dict] = {}
    for topic_id, total in totals.items():
        scores = [s for (t, _q), s in best.items() if t == topic_id]
        out[topic_id] = {
            "attempted": len(scores),
            "total": total,
            "score": round(sum(scores) / len(scores), 3) if scores else None,
        }
    return out


def score_history(user) -> list[dict]:
    rows = (
        graded_attempts(user)
        .order_by("submitted")
        .values_list("submitted", "question__topic__title", "question__title", "score", "result")
    )
    # A re-graded attempt (python -m manage regrade) is marked: its score is not the one the
    # learner saw when they answered.
    return [
        {
            "when": w,
            "topic": t,
            "question": q,
            "score": s,
            "regraded": bool((r or {}).get("regraded")),
        }
        for w, t, q, s, r in rows
    ]


def competency_scores(user) -> list[dict]:
    """Mean score per competency, weakest first (only competencies practised)."""
    sums: dict[str, list[float]] = defaultdict(list)
    for competencies, score in graded_attempts(user).values_list("question__competencies", "score"):
        for c in competencies or []:
            sums[c].append(score)
    rows = [
        {"competency": c, "score": round(sum(v) / len(v), 3), "attempts": len(v)}
        for c, v in sums.items()
        if c in COMPETENCIES
    ]
    return sorted(rows, key=lambda r: r["score"])


def reviews_due_by_day(user, days: int = 14) -> list[dict]:
    """Cards due on each of the next `days` days; overdue ones count today."""
    today = timezone.localdate()
    counts = defaultdict(int)
    cards = ReviewCard.objects.filter(published_q("question__"), user=user)
    for due in cards.values_list("due", flat=True):
        day = max(timezone.localtime(due).date(), today)
        counts[day] += 1
    return [
        {"day": today + timedelta(days=i), "due": counts[today + timedelta(days=i)]}
        for i in range(days)
    ]


def due_count(user) -> int:
    return ReviewCard.objects.filter(
        published_q("question__"), user=user, due__lte=timezone.now()
    ).count()


def next_in_topic(user, topic: Topic) -> Question | None:
    """The published question of `topic` the learner has tried least, then scored lowest."""
    questions = (
        Question.objects.published()
        .filter(topic=topic)
        .annotate(
            tries=Count(
                "attempts", filter=Q(attempts__user=user, attempts__submitted__isnull=False)
            ),
            best=Avg("attempts__score", filter=Q(attempts__user=user)),
        )
    )
    return questions.order_by("tries", "best", "order").first()


def surprise(user) -> Question | None:
    """A random published question, never-tried ones first."""
    fresh = Question.objects.published().exclude(attempts__user=user)
    return (fresh if fresh.exists() else Question.objects.published()).order_by("?").first()
