"""Recompute a stored rubric result's score after checks (or a judge) changed verdicts.

The one place the practice side takes `rescore` from: the grader's own
`trainer.grading.rubric.rescore` once it has one, else the contract's formula below (the
same formula: Σ weight × (1 hit, estimate unclear, 0 otherwise) − Σ penalty weights hit,
over Σ non-penalty weight, clamped to 0..1).
"""

from __future__ import annotations

import copy as copy_module

VERIFIED_BY = ("verify", "check", "judge")


def verdict_of(point: dict) -> str:
    """A stored point's verdict; an old result (only `hit`) reads as hit or missed."""
    if point.get("verdict"):
        return point["verdict"]
    return "hit" if point.get("hit") else "missed"


def decided_by(point: dict) -> str:
    return point.get("decided_by") or "estimate"


def local_rescore(result: dict) -> dict:
    """`result` with `score` and `verified_share` recomputed from its points' verdicts."""
    earnable = credited = verified = lost = 0.0
    for p in result.get("points", []):
        weight = float(p.get("weight", 1))
        verdict = verdict_of(p)
        if p.get("penalty"):
            lost += weight if verdict == "hit" else 0.0
            continue
        earnable += weight
        if verdict == "hit":
            credited += weight
            verified += weight if decided_by(p) in VERIFIED_BY else 0.0
        elif verdict == "unclear":
            credited += weight * float(p.get("estimate") or 0.0)
    score = max(0.0, min(1.0, (credited - lost) / earnable)) if earnable else 0.0
    share = verified / credited if credited else 0.0
    return {**result, "score": round(score, 4), "verified_share": round(share, 4)}


try:  # the grader's own, when it has one (trainer.grading.rubric, issue 19's pipeline)
    from trainer.grading.rubric import rescore as _grader_rescore
except ImportError:  # pragma: no cover - until the pipeline lands
    _grader_rescore = None


def rescore(result: dict) -> dict:
    """The result with its score and verified share recomputed (a new dict)."""
    if _grader_rescore is not None:
        copy = copy_module.deepcopy(result)
        out = _grader_rescore(copy)
        return out if isinstance(out, dict) else copy  # in place or returned: both work
    return local_rescore(result)
