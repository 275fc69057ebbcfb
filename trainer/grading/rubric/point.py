"""What the grader reads (`Point`) and what it returns (`PointResult`, `RubricResult`).

`RubricResult.as_dict()` is the shape stored in `Attempt.result` (docs in the issue 19
contract): per point a verdict (hit / unclear / contradicted / missed), the calibrated
`estimate` that it is covered, how it was decided, the learner's sentence and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainer.grading.rubric.numbers import Expect, parse_expect

GRADER_VERSION = "3.0"
VERDICTS = ("hit", "unclear", "contradicted", "missed")


@dataclass(frozen=True)
class Point:
    """One rubric point. Only `text` and `weight` are required: a plain-text point is
    graded with what its text gives (its words, its numbers, negation)."""

    text: str
    weight: float
    concepts: tuple[str, ...] = ()
    penalty: bool = False
    claims: tuple[str, ...] = ()
    contradictions: tuple[str, ...] = ()
    key_terms: tuple[str, ...] = ()
    expects: tuple[Expect, ...] = ()
    check: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)
    rubric_version: str = ""

    def __post_init__(self) -> None:
        for name in ("concepts", "claims", "contradictions", "key_terms"):
            object.__setattr__(self, name, tuple(str(v) for v in getattr(self, name) or ()))
        object.__setattr__(self, "expects", tuple(parse_expect(e) for e in self.expects or ()))
        object.__setattr__(self, "weight", float(self.weight))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Point:
        """A point from a plain dict: RubricPoint.as_point(), a bank YAML point (literal
        `expects` only), or a `grade_answers` rubric line."""
        point = cls(
            text=str(data["text"]),
            weight=float(data.get("weight", 1.0)),
            concepts=tuple(data.get("concepts") or ()),
            penalty=bool(data.get("penalty", False)),
            claims=tuple(data.get("claims") or ()),
            contradictions=tuple(data.get("contradictions") or ()),
            key_terms=tuple(data.get("key_terms") or ()),
            expects=tuple(data.get("expects") or ()),
            check=data.get("check") or None,
            rubric_version=str(data.get("rubric_version") or ""),
        )
        return point if point.rubric_version else point.with_version()

    def with_version(self) -> Point:
        """This point with `rubric_version` set from its text and metadata when missing."""
        if self.rubric_version:
            return self
        canonical = {
            "text": self.text,
            "weight": self.weight,
            "penalty": self.penalty,
            "concepts": self.concepts,
            "claims": self.claims,
            "contradictions": self.contradictions,
            "key_terms": self.key_terms,
            "expects": [dataclasses.asdict(e) for e in self.expects],
            "check": self.check or {},
        }
        digest = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
        return replace(self, rubric_version=digest[:12])


def public_check(check: Mapping[str, Any] | None, seed: str) -> dict[str, Any] | None:
    """What the learner sees of a point's check (never the answer): the question, its kind,
    and for multiple choice the options in a fixed shuffled order (seeded by the point)."""
    if not check or not check.get("ask"):
        return None
    kind = check.get("kind") or ("number" if check.get("number") is not None else "choice")
    if kind == "number":
        number = check.get("number") or {}
        unit = number.get("unit", "") if isinstance(number, Mapping) else ""
        return {"ask": check["ask"], "kind": "number", "unit": unit}
    options = [str(check.get("answer", "")), *(str(o) for o in check.get("options") or ())]
    options = sorted(
        dict.fromkeys(o for o in options if o),
        key=lambda o: hashlib.sha256(f"{seed}:{o}".encode()).hexdigest(),
    )
    return {"ask": check["ask"], "kind": "choice", "options": options}


@dataclass(frozen=True)
class PointResult:
    """The grader's verdict on one point. The first eight fields keep their old order."""

    index: int
    hit: bool
    similarity: float
    concepts_found: tuple[str, ...]
    evidence: str
    penalty: bool
    weight: float
    evidence_parts: tuple[str, ...] = ()  # the answer's own sentences, for highlighting
    verdict: str = ""  # hit | unclear | contradicted | missed ("" = from `hit`)
    estimate: float | None = None  # calibrated P(covered)
    decided_by: str = "verify"
    reason: str = ""
    attempted: bool | None = None  # the answer mentioned the point (it was retrieved)
    text: str = ""
    rubric_version: str = ""
    check: Mapping[str, Any] | None = field(default=None, hash=False, compare=False)

    def __post_init__(self) -> None:
        if not self.verdict:
            object.__setattr__(self, "verdict", "hit" if self.hit else "missed")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        object.__setattr__(self, "hit", self.verdict == "hit")
        if self.estimate is None:
            object.__setattr__(self, "estimate", 1.0 if self.hit else 0.0)
        if self.attempted is None:
            object.__setattr__(self, "attempted", self.verdict != "missed")

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "text": self.text,
            "weight": self.weight,
            "penalty": self.penalty,
            "verdict": self.verdict,
            "estimate": round(float(self.estimate or 0.0), 4),
            "decided_by": self.decided_by,
            "evidence": self.evidence,
            "evidence_parts": list(self.evidence_parts),
            "reason": self.reason,
            "attempted": bool(self.attempted),
            "rubric_version": self.rubric_version,
            "check": dict(self.check) if self.check else None,
            # read by feedback written before verdicts existed
            "hit": self.hit,
            "similarity": self.similarity,
            "concepts_found": list(self.concepts_found),
        }


@dataclass(frozen=True)
class RubricResult:
    score: float  # 0..1
    points: tuple[PointResult, ...]
    confidence: float = 0.0  # 0..1: how far the estimates sit from 0.5
    flags: tuple[str, ...] = ()
    verified_share: float | None = None  # share of credited weight that is verified

    def __post_init__(self) -> None:
        if self.verified_share is None:
            from trainer.grading.rubric.score import verified_share

            object.__setattr__(self, "verified_share", verified_share(self.points))

    def as_dict(self) -> dict[str, Any]:
        return {
            "grader": "rubric",
            "grader_version": GRADER_VERSION,
            "score": self.score,
            "verified_share": self.verified_share,
            "confidence": self.confidence,
            "flags": list(self.flags),
            "points": [p.as_dict() for p in self.points],
        }
