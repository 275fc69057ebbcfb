"""Reads a stored rubric result into what the feedback shows: per point its verdict, how it
was decided, the learner's sentence and why; the total and how much of it is verified.

Works on the verifying grader's results (`verdict`, `decided_by`, `reason`, ...) and on old
stored ones (only `hit`): those read as hit or missed, decided by estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainer.rescore import decided_by, verdict_of

# A verdict that tells a learner "you are wrong" needs proof (issue 29): "Verified wrong"
# comes only from a number outside every value the point's assumptions allow, a negated
# statement of the point, a failed check or the judge. Anything the grader could not prove
# reads "Not verified" and offers the point's check.
VERDICT_LABELS = {
    "hit": "Verified hit",
    "unclear": "Not verified",
    "contradicted": "Verified wrong",
    "missed": "Missed",
}
PENALTY_LABELS = {
    "hit": "Said (red flag)",
    "unclear": "Possibly said (not verified)",
    "missed": "Not said",
}
DECIDED_LABELS = {
    "check": "by your check",
    "judge": "by the judge model",
    "verify": "by the grader's checks of your sentence",
    "estimate": "the grader's estimate",
}


@dataclass(frozen=True)
class PointRow:
    index: int
    text: str
    weight: float
    penalty: bool
    verdict: str
    decided_by: str
    evidence: str
    evidence_parts: tuple[str, ...]
    reason: str
    estimate: float | None
    attempted: bool
    rubric_version: str
    self_hit: bool | None = None
    has_check: bool = False  # the grader offered this point's check

    @property
    def hit(self) -> bool:
        return self.verdict == "hit"

    @property
    def shown_verdict(self) -> str:
        """The verdict the page shows: a "contradicted" or red-flag hit that nothing verified
        (results stored before grader 3.0) shows as not verified."""
        unproven = self.decided_by == "estimate" and self.verdict in ("contradicted", "hit")
        if unproven and (self.penalty or self.verdict == "contradicted"):
            return "unclear"
        return self.verdict

    @property
    def verdict_label(self) -> str:
        labels = PENALTY_LABELS if self.penalty else VERDICT_LABELS
        verdict = self.shown_verdict
        if verdict == "hit" and not self.penalty and self.decided_by == "estimate":
            return "Hit (estimated)"  # a result stored before verdicts were verified
        if verdict == "unclear" and not self.penalty and self.has_check:
            return "Not verified: answer the check"
        return labels.get(verdict, verdict.title())

    @property
    def decided_label(self) -> str:
        return DECIDED_LABELS.get(self.decided_by, self.decided_by)

    @property
    def disagrees(self) -> bool:
        return self.self_hit is not None and self.self_hit != self.hit


@dataclass(frozen=True)
class RubricLine:
    """A rubric point as the page knows it when the stored result lacks its text."""

    text: str
    weight: float = 1.0
    penalty: bool = False


def point_rows(
    result: dict, rubric: Sequence[RubricLine], self_points: Sequence[int] | None = None
) -> list[PointRow]:
    """One row per rubric point (by index), read from `result` (old or new shape)."""
    stored = {p.get("index", i): p for i, p in enumerate((result or {}).get("points", []))}
    chosen = set(self_points) if self_points is not None else None
    rows = []
    for i, line in enumerate(rubric):
        p = stored.get(i, {})
        estimate = p.get("estimate")
        rows.append(
            PointRow(
                index=i,
                text=line.text,
                weight=line.weight,
                penalty=line.penalty,
                verdict=verdict_of(p) if p else "missed",
                decided_by=decided_by(p),
                evidence=p.get("evidence", ""),
                evidence_parts=tuple(p.get("evidence_parts") or ()),
                reason=p.get("reason", ""),
                estimate=float(estimate) if estimate is not None else None,
                attempted=bool(p.get("attempted", p.get("hit", False))),
                rubric_version=p.get("rubric_version", ""),
                self_hit=(i in chosen) if chosen is not None else None,
                has_check=bool(p.get("check")),
            )
        )
    return rows


@dataclass(frozen=True)
class Total:
    score_pct: int
    verified_pct: int
    estimated_pct: int

    @property
    def text(self) -> str:
        return f"{self.score_pct}% — {self.verified_pct}% verified, {self.estimated_pct}% estimated"


def total(result: dict, score: float | None) -> Total:
    """The score and how much of it is verified (check, judge or the grader's verify
    stage) vs estimated. An old result has no verified share: all of it is estimated."""
    score_pct = round(100 * (score if score is not None else result.get("score", 0.0) or 0.0))
    share = float(result.get("verified_share") or 0.0)
    verified = min(score_pct, round(score_pct * share))
    return Total(score_pct, verified, score_pct - verified)
