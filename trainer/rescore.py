"""How the practice side reads a stored point's verdict, and where it takes `rescore` from
(the grader's: `trainer.grading.rubric.rescore`, the contract's one formula)."""

from __future__ import annotations

from trainer.grading.rubric import rescore

__all__ = ["decided_by", "rescore", "verdict_of"]


def verdict_of(point: dict) -> str:
    """A stored point's verdict; an old result (only `hit`) reads as hit or missed."""
    if point.get("verdict"):
        return point["verdict"]
    return "hit" if point.get("hit") else "missed"


def decided_by(point: dict) -> str:
    """How the verdict was reached; an old result's was an estimate."""
    return point.get("decided_by") or "estimate"
