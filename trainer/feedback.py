"""Reads a stored rubric result into what the feedback shows: per point its verdict, how it
was decided, the learner's sentence and why; the total and how much of it is verified.

Works on the verifying grader's results (`verdict`, `decided_by`, `reason`, ...) and on old
stored ones (only `hit`): those read as hit or missed, decided by estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainer.rescore import decided_by, verdict_of

VERDICT_LABELS = {
    "hit": "Hit",
    "unclear": "Unclear",
    "contradicted": "Contradicted",
    "missed": "Missed",
}
PENALTY_LABELS = {"hit": "Said (red flag)", "unclear": "Possibly said", "missed": "Not said"}
DECIDED_LABELS = {
    "check": "confirmed by your check",
    "judge": "decided by the judge model",
    "verify": "verified by the grader",
    "estimate": "estimated (not verified)",
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

    @property
    def hit(self) -> bool:
        return self.verdict == "hit"

    @property
    def verdict_label(self) -> str:
        labels = PENALTY_LABELS if self.penalty else VERDICT_LABELS
        return labels.get(self.verdict, self.verdict.title())

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
