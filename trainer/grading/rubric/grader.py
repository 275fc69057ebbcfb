"""The pipeline end to end, and `RubricGrader`, its face in the grader registry.

split -> retrieve -> verify -> estimate -> score. `grade` is pure (no database); the
grader reads a question's rubric points through RubricPoint.as_point() when it has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from trainer.grading.registry import Grader
from trainer.grading.rubric import estimate, params, retrieve, score, verify
from trainer.grading.rubric.point import Point, PointResult, RubricResult, public_check

LIST_CAP = 0.1  # most a point earns from an answer that is a list of terms
LIST_REASON = "Your answer lists terms; it does not say how they connect."


def is_term_list(r: retrieve.Retrieval, t: params.Thresholds) -> bool:
    """Whether most of the answer's sentences are lists of terms (keyword stuffing)."""
    sentences = [u for u in r.units if len(u.parts) == 1]
    return bool(sentences) and sum(u.stuffing >= t.stuffed for u in sentences) >= len(sentences) / 2


def evaluate(
    r: retrieve.Retrieval, points: Sequence[Point], p: params.Params = params.TUNED
) -> RubricResult:
    """Verdicts, estimates and the score from a retrieval (cheap: no model call)."""
    results = []
    decisions = verify.decide_all(points, r, p.thresholds)
    listed = is_term_list(r, p.thresholds)
    context = estimate.answer_context(decisions, [q.penalty for q in points])
    for i, (point, d) in enumerate(zip(points, decisions, strict=True)):
        keyed = bool(point.key_terms)
        prob = estimate.estimate(d, keyed, p.calibration, context)
        if d.verdict == "missed" and not point.penalty:
            prob = min(prob, 0.5)  # nothing in the answer is about it
        if listed and not point.penalty and d.verdict in ("hit", "unclear"):
            d = dataclasses.replace(d, verdict="unclear", reason=LIST_REASON)
            prob = min(prob, LIST_CAP)  # naming the terms is not stating the point
        version = point.with_version().rubric_version
        unit = r.units[d.unit] if d.unit is not None and d.verdict != "missed" else None
        results.append(
            PointResult(
                index=i,
                hit=d.verdict == "hit",
                similarity=round(d.best_pos, 4),
                concepts_found=(),
                evidence=unit.text if unit else "",
                penalty=point.penalty,
                weight=point.weight,
                evidence_parts=unit.parts if unit else (),
                verdict=d.verdict,
                estimate=round(prob, 4),
                decided_by="verify" if d.verdict in ("hit", "contradicted") else "estimate",
                reason=d.reason,
                attempted=d.attempted,
                text=point.text,
                rubric_version=version,
                check=public_check(point.check, version)
                if d.attempted and d.verdict in ("unclear", "contradicted")
                else None,
            )
        )
    flags = list(r.flags)
    nothing = not any(x.attempted for x in results if not x.penalty)
    if r.units and (nothing or float(r.pos.max(initial=-1.0)) < p.thresholds.off_topic):
        flags.append("off-topic")
    if any(x.penalty and x.verdict == "hit" for x in results):
        flags.append("red flag")
    confidence = sum(abs(x.estimate - 0.5) * 2 for x in results) / len(results) if results else 0.0
    return RubricResult(score.score(results), tuple(results), round(confidence, 3), tuple(flags))


def grade(answer: str, points: Sequence[Point], prompt: str = "") -> RubricResult:
    """Grade `answer` against `points` (and flag an answer that restates `prompt`)."""
    points = [p if isinstance(p, Point) else Point.from_dict(p) for p in points]
    return evaluate(retrieve.retrieve(answer, points, prompt), points)


def points_of(question) -> list[Point]:
    """A question's rubric as Points (metadata and rubric version where the model has them)."""
    out = []
    for rp in question.rubric.all():
        if hasattr(rp, "as_point"):
            point = Point.from_dict(rp.as_point() | {"rubric_version": rp.version()})
        else:
            point = Point(rp.text, rp.weight, tuple(rp.concepts), rp.penalty)
        out.append(point)
    return out


class RubricGrader(Grader):
    """Written answers in the grader registry: the question's rubric points, graded here."""

    name = "rubric"

    def grade_answer(self, question, answer: str) -> RubricResult:
        from trainer.grading import rubric  # looked up at call time: tests swap `grade`

        return rubric.grade(answer, points_of(question), prompt=question.prompt)

    def warm_up(self) -> None:
        # Load the sentence model now, so the first learner to submit does not wait ~8 s.
        from trainer.grading.rubric import encoder

        encoder.embed(["warm up"])
