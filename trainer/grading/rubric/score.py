"""Stage 5: the score from the verdicts, and `rescore` after checks or a judge change them.

score = (Σ weight × credit − Σ weight of penalty points hit) / Σ non-penalty weight, clamped
to 0..1, where credit is 1 for hit, `estimate` for unclear and 0 otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

VERIFIED_BY = ("verify", "check", "judge")


def _row(point: Any) -> dict[str, Any]:
    """A result point (object or stored dict) as a dict with a verdict; old stored results
    (`"hit": bool`, no verdict) read as hit/missed decided by estimate."""
    if not isinstance(point, Mapping):
        point = point.as_dict()
    if point.get("verdict"):
        return dict(point)
    hit = bool(point.get("hit"))
    return dict(point) | {
        "verdict": "hit" if hit else "missed",
        "estimate": 1.0 if hit else 0.0,
        "decided_by": "estimate",
    }


def credit(point: Mapping[str, Any]) -> float:
    """0..1: how much of a non-penalty point's weight the verdict earns."""
    verdict = point["verdict"]
    if verdict == "hit":
        return 1.0
    if verdict == "unclear":
        return float(point.get("estimate") or 0.0)
    return 0.0


def score(points: Iterable[Any]) -> float:
    rows = [_row(p) for p in points]
    earnable = sum(float(r["weight"]) for r in rows if not r.get("penalty"))
    if not earnable:
        return 0.0
    earned = sum(float(r["weight"]) * credit(r) for r in rows if not r.get("penalty"))
    lost = sum(float(r["weight"]) for r in rows if r.get("penalty") and r["verdict"] == "hit")
    return round(max(0.0, min(1.0, (earned - lost) / earnable)), 4)


def verified_share(points: Iterable[Any]) -> float:
    """Share of the credited weight that comes from verified hits (verify, check, judge)."""
    rows = [r for r in map(_row, points) if not r.get("penalty")]
    credited = sum(float(r["weight"]) * credit(r) for r in rows)
    verified = sum(
        float(r["weight"])
        for r in rows
        if r["verdict"] == "hit" and r.get("decided_by", "estimate") in VERIFIED_BY
    )
    return round(verified / credited, 4) if credited else 0.0


def rescore(result: Mapping[str, Any]) -> dict[str, Any]:
    """A stored result with `score` and `verified_share` recomputed from its points'
    verdicts (after checks or a judge changed some); other fields are kept."""
    points = result.get("points") or []
    out = dict(result)
    if not points:
        return out
    rows = [_row(p) for p in points]
    red = any(r.get("penalty") and r["verdict"] == "hit" for r in rows)
    flags = [f for f in result.get("flags") or [] if f != "red flag"]
    out["flags"] = flags + (["red flag"] if red else [])
    out["score"] = score(points)
    out["verified_share"] = verified_share(points)
    return out
