"""The scorecard of a mock (reads): per question, per competency, time, verdict, next steps.

Scores: a question's auto score is the practice grader's (rubric, or arithmetic credit per
step); a late answer counts MOCK_LATE_CREDIT of it, an unreached question 0. Competencies
are the issue's six. The bank also tags `quality` (output quality under quantization,
distillation, speculative decoding); here it counts as `reliability`: a serving change that
silently degrades answers is a reliability failure. Each competency's score is 10 × the
budget-weighted mean of its questions' scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from common import lab_catalog
from mock.models import MockInterview, MockItem
from questions.models import Question
from trainer import api as practice

SIX = ("latency", "memory", "throughput", "cost", "reliability", "safety")
MAPPED = {"quality": "reliability"}

BANDS = (
    (0.0, "0–2.9", "Not yet: the mechanism is missing or wrong; an interviewer would stop here."),
    (3.0, "3–4.9", "Developing: names the right ideas, but misses the numbers or the trade-off."),
    (5.0, "5–6.9", "Solid: the right mechanism with some numbers; a mid-level answer."),
    (7.0, "7–8.9", "Strong: mechanism, numbers and trade-offs; a senior answer."),
    (9.0, "9–10", "Exceptional: also anticipates the follow-ups and the failure modes."),
)
SENIOR_OVERALL = 7.0  # overall score for "meets the bar for a senior inference round"
SENIOR_FLOOR = 5.0  # ... with no assessed competency below this
MID_OVERALL = 5.0


def competencies_of(question: Question) -> list[str]:
    """The question's tags mapped onto the six (unknown tags dropped, order kept)."""
    out: list[str] = []
    for tag in question.competencies or []:
        name = MAPPED.get(tag, tag)
        if name in SIX and name not in out:
            out.append(name)
    return out


def band(score: float | None) -> str:
    if score is None:
        return "Not assessed in this loop."
    return [text for low, _label, text in BANDS if score >= low][-1]


@dataclass
class ItemCard:
    item: MockItem
    question: Question
    reached: bool
    used_s: float
    auto: float | None  # 0..1 after the late discount
    raw: float | None  # 0..1 as graded
    interviewer: float | None
    stepwise: bool = False  # graded step by step (arithmetic), not as one written answer
    rubric: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    follow_ups: list = field(default_factory=list)
    competencies: list[str] = field(default_factory=list)


@dataclass
class CompetencyCard:
    name: str
    auto: float | None  # 0..10
    interviewer: float | None
    questions: int
    meaning: str


@dataclass
class Weak:
    name: str
    score: float | None
    practice: list[Question]
    labs: list[dict]


@dataclass
class Scorecard:
    mock: MockInterview
    items: list[ItemCard]
    competencies: list[CompetencyCard]
    overall_auto: float
    overall_interviewer: float | None
    verdict: str
    used_s: float
    budget_s: float
    weakest: list[Weak]
    bands = BANDS
    thresholds = {"senior": SENIOR_OVERALL, "floor": SENIOR_FLOOR, "mid": MID_OVERALL}


def _rubric_rows(item: MockItem) -> list[dict]:
    """Per rubric point: the grader's verdict (in words, how decided, why) and the
    interviewer's tick."""
    attempt = item.attempt
    result = (attempt.result if attempt else None) or {}
    lines = [practice.RubricLine(p.text, p.weight, p.penalty) for p in item.question.rubric.all()]
    marked = set(item.interviewer_points or [])
    return [
        {
            "row": row,
            "index": row.index,
            "text": row.text,
            "weight": row.weight,
            "penalty": row.penalty,
            "hit": row.hit,
            "evidence": row.evidence,
            "marked": row.index in marked if item.interviewer_points is not None else None,
        }
        for row in practice.point_rows(result, lines)
    ]


def follow_up_cards(item: MockItem) -> list[dict]:
    """Each follow-up answer with its verdict rows when it was graded (it had a rubric)."""
    items = item.question.follow_up_items()
    cards = []
    for answer in item.follow_up_answers.all():
        rubric = items[answer.index]["rubric"] if answer.index < len(items) else []
        lines = [practice.RubricLine(p["text"], p["weight"], p["penalty"]) for p in rubric]
        graded = answer.score is not None
        cards.append(
            {
                "answer": answer,
                "rows": practice.point_rows(answer.result, lines) if graded else [],
                "total": practice.total(answer.result, answer.score) if graded else None,
            }
        )
    return cards


def _step_rows(item: MockItem) -> list[dict]:
    if item.attempt is None:
        return []
    late = set(item.late_steps or [])
    return [
        {
            "name": a.step_name,
            "raw": a.raw,
            "verdict": a.get_verdict_display(),
            "credit": a.credit,
            "feedback": a.feedback,
            "expected": a.expected,
            "unit": a.unit,
            "late": a.step_name in late,
        }
        for a in item.attempt.step_answers.all()
    ]


def _item_card(item: MockItem, now) -> ItemCard:
    late_credit = float(settings.MOCK_LATE_CREDIT)
    attempt = item.attempt
    reached = item.started is not None and attempt is not None
    raw = attempt.score if reached and attempt.score is not None else (0.0 if not reached else None)
    stepwise = practice.grader_for(item.question).stepwise
    if stepwise and reached:
        steps = (attempt.result or {}).get("steps") or max(1, attempt.step_answers.count())
        late = set(item.late_steps or [])
        auto = (
            sum(
                a.credit * (late_credit if a.step_name in late else 1.0)
                for a in attempt.step_answers.all()
            )
            / steps
        )
    else:
        auto = None if raw is None else raw * (late_credit if item.late else 1.0)
    end = item.closed or now
    used = (end - item.started).total_seconds() if item.started else 0.0
    return ItemCard(
        item=item,
        question=item.question,
        reached=reached,
        used_s=max(0.0, min(used, item.budget_s + settings.MOCK_DEADLINE_GRACE_S)),
        auto=auto,
        raw=raw,
        interviewer=item.interviewer_score,
        stepwise=stepwise,
        rubric=_rubric_rows(item),
        steps=_step_rows(item),
        follow_ups=follow_up_cards(item),
        competencies=competencies_of(item.question),
    )


def _weighted(pairs: list[tuple[float, float]]) -> float | None:
    total = sum(w for _s, w in pairs)
    return round(10 * sum(s * w for s, w in pairs) / total, 1) if total else None


def _competency_cards(items: list[ItemCard]) -> list[CompetencyCard]:
    cards = []
    for name in SIX:
        mine = [c for c in items if name in c.competencies]
        auto = _weighted([(c.auto or 0.0, c.item.budget_s) for c in mine])
        peer = _weighted(
            [(c.interviewer, c.item.budget_s) for c in mine if c.interviewer is not None]
        )
        cards.append(CompetencyCard(name, auto, peer, len(mine), band(auto)))
    return cards


def verdict(overall: float, competencies: list[CompetencyCard]) -> str:
    assessed = [c.auto for c in competencies if c.auto is not None]
    if overall >= SENIOR_OVERALL and all(s >= SENIOR_FLOOR for s in assessed):
        return "Meets the bar for a senior inference round"
    if overall >= MID_OVERALL:
        return "Meets the bar for a mid-level inference round, not yet a senior one"
    return "Below the bar for an inference round: practise the weakest skills below"


def _weakest(mock: MockInterview, competencies: list[CompetencyCard]) -> list[Weak]:
    ranked = sorted(
        competencies, key=lambda c: (c.auto is None, c.auto if c.auto is not None else 0)
    )[:3]
    in_loop = set(mock.items.values_list("question_id", flat=True))
    out = []
    for c in ranked:
        tags = [c.name] + [k for k, v in MAPPED.items() if v == c.name]
        pool = [
            q
            for q in Question.objects.published()
            .annotate(tries=Count("attempts", filter=Q(attempts__user=mock.user)))
            .order_by("tries", "difficulty", "order")
            if any(t in (q.competencies or []) for t in tags)
        ]
        fresh = [q for q in pool if q.pk not in in_loop] or pool
        labs: list[dict] = []
        for q in [*[q for q in pool if q.pk in in_loop], *fresh]:
            for slug in q.related_labs or []:
                title = lab_catalog.title(slug)
                if title is not None and all(lab["slug"] != slug for lab in labs):
                    labs.append({"slug": slug, "title": title})
        out.append(Weak(c.name, c.auto, fresh[:3], labs[:3]))
    return out


def scorecard(mock: MockInterview) -> Scorecard:
    now = timezone.now()
    items = [
        _item_card(item, now)
        for item in mock.items.select_related("question", "attempt").prefetch_related(
            "question__rubric", "follow_up_answers", "attempt__step_answers"
        )
    ]
    competencies = _competency_cards(items)
    overall = _weighted([(c.auto or 0.0, c.item.budget_s) for c in items]) or 0.0
    peer = _weighted([(c.interviewer, c.item.budget_s) for c in items if c.interviewer is not None])
    return Scorecard(
        mock=mock,
        items=items,
        competencies=competencies,
        overall_auto=overall,
        overall_interviewer=peer,
        verdict=verdict(overall, competencies),
        used_s=sum(c.used_s for c in items),
        budget_s=mock.budget_s,
        weakest=_weakest(mock, competencies),
    )


def history(user, loop) -> list[dict]:
    """Finished mocks of `loop`, oldest first, with their stored scores (for the chart)."""
    rows = MockInterview.objects.filter(
        user=user, loop=loop, status=MockInterview.Status.FINISHED
    ).order_by("finished")
    return [
        {
            "id": m.pk,
            "when": m.finished,
            "overall": m.overall,
            "competencies": m.competencies,
        }
        for m in rows
    ]
