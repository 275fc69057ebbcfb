"""Re-grade stored written answers with the current grader (`python -m manage regrade`).

Scores stay comparable over time: every stored result names its grader version and each
point's rubric version, so after the grader or a rubric changes, stored attempts can be
re-graded and the command says how many scores moved. What it keeps: the learner's answer,
their self-assessment, their review schedule (fsrs cards are not rewritten retroactively)
and the verdicts of checks they answered (`trainer.grading` re-applies them when the point's
rubric version is unchanged). What it records: `result["regraded"]` with the time and the
score and grader version it replaced; the progress chart marks such attempts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from trainer.grading.registry import grader_for
from trainer.models import Attempt

MOVED = 0.005  # a score that changes by less than this has not moved (rounding)


@dataclass
class RegradeReport:
    attempts: int = 0
    moved: int = 0
    up: int = 0
    down: int = 0
    failed: list[str] = field(default_factory=list)
    deltas: list[float] = field(default_factory=list)
    contradicted_before: int = 0  # "contradicted" verdicts on ordinary points
    contradicted_after: int = 0
    flags_before: int = 0  # red flags raised
    flags_after: int = 0

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would move" if dry_run else "moved"
        mean = sum(abs(d) for d in self.deltas) / len(self.deltas) if self.deltas else 0.0
        dry = " (dry run: nothing saved)" if dry_run else ""
        out = [
            f"{self.attempts} attempt(s) re-graded{dry}; "
            f"{self.moved} score(s) {verb} ({self.up} up, {self.down} down; "
            f"mean |change| of those {mean * 100:.1f} points)"
        ]
        out.append(
            f"contradicted verdicts: {self.contradicted_before} before, "
            f"{self.contradicted_after} after; red flags raised: {self.flags_before} before, "
            f"{self.flags_after} after"
        )
        out += [f"failed: {f}" for f in self.failed]
        return out


def _count(result: dict) -> tuple[int, int]:
    """(contradicted ordinary points, red flags raised) of a stored result."""
    points = result.get("points") or []
    contradicted = sum(p.get("verdict") == "contradicted" and not p.get("penalty") for p in points)
    flags = sum(bool(p.get("penalty")) and p.get("verdict") == "hit" for p in points)
    return contradicted, flags


def regradable(question_slug: str | None = None):
    """Submitted written answers (graded by a written-answer grader), oldest first."""
    attempts = Attempt.objects.filter(submitted__isnull=False).exclude(answer="")
    attempts = attempts.filter(question__kind__in=["scenario", "design"])
    if question_slug:
        attempts = attempts.filter(question__slug=question_slug)
    return attempts.select_related("question").order_by("pk")


def _kept_checks(old: dict, new: dict) -> dict:
    """Re-apply the verdicts of checks the learner answered, for points whose rubric version
    did not change (a changed point's old check says nothing about the new one)."""
    from trainer.grading.rubric import rescore

    old_points = {p.get("index"): p for p in old.get("points", [])}
    points, kept = [], 0
    for p in new.get("points", []):
        before = old_points.get(p.get("index"))
        same = before and before.get("rubric_version") == p.get("rubric_version")
        if same and before.get("decided_by") == "check" and p.get("attempted", True):
            p = p | {k: before[k] for k in ("verdict", "decided_by", "reason") if k in before}
            kept += 1
        points.append(p)
    result = new | {"points": points}
    if "checks" in old:
        result["checks"] = old["checks"]
    return rescore(result) if kept else result


def regrade(attempts: Iterable[Attempt], *, dry_run: bool = False) -> RegradeReport:
    report = RegradeReport()
    for attempt in attempts:
        question = attempt.question
        try:
            new = grader_for(question).grade_answer(question, attempt.answer).as_dict()
        except Exception as exc:  # one bad attempt must not stop the others
            report.failed.append(
                f"attempt {attempt.pk} ({question.slug}): {type(exc).__name__}: {exc}"
            )
            continue
        old = attempt.result or {}
        new = _kept_checks(old, new)
        report.attempts += 1
        c, f = _count(old)
        report.contradicted_before += c
        report.flags_before += f
        c, f = _count(new)
        report.contradicted_after += c
        report.flags_after += f
        before = attempt.score if attempt.score is not None else 0.0
        delta = new["score"] - before
        if abs(delta) >= MOVED:
            report.moved += 1
            report.up += delta > 0
            report.down += delta < 0
            report.deltas.append(delta)
        if dry_run:
            continue
        new["regraded"] = {
            "at": timezone.now().isoformat(),
            "from_score": attempt.score,
            "from_grader_version": old.get("grader_version", "1"),
        }
        with transaction.atomic():
            locked = Attempt.objects.select_for_update().get(pk=attempt.pk)
            locked.result = new
            locked.score = new["score"]
            locked.grader_error = ""
            locked.save(update_fields=["result", "score", "grader_error"])
    return report
