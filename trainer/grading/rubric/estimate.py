"""Stage 4: the calibrated probability that an expert credits the point.

A small logistic model over the verify stage's features, fitted on the tuning part of
the evaluation set (bench/rubric_calibration.py --tune) and stored in tuned.json.
"""

from __future__ import annotations

import math

from trainer.grading.rubric import numbers
from trainer.grading.rubric.params import Calibration
from trainer.grading.rubric.verify import Decision

FEATURES = (
    "pos",  # closeness of the best unit to the point's text and claims
    "margin",  # pos minus closeness to the contradictions, at the evidence unit
    "share",  # share of the point's terms in the evidence unit
    "verified",
    "contradicted",
    "number_ok",
    "number_wrong",
    "stuffing",
    "keyed",  # the point has authored key terms
    "negated_any",  # a term of the point is negated somewhere in the evidence
    "neg",  # closeness of the evidence to the nearest contradiction
)
# Until tuned: a hit is likely credited, an unclear point somewhat, the rest not.
_FALLBACK = Calibration(FEATURES, (4.0, 2.0, 1.0, 2.0, -2.0, 0.5, -1.0, -1.0, 0.0, -0.5, 0.0), -3.0)
# (the fallback only serves until tuned.json exists; tests run with tuned.json)


def features(d: Decision, keyed: bool) -> list[float]:
    f = d.facts
    if f is None:
        return [0.0] * len(FEATURES)
    return [
        d.best_pos,
        f.pos - max(f.neg, 0.0),
        f.share,
        float(f.verified),
        float(f.contradicted),
        float(f.numbers is numbers.Status.OK),
        float(f.numbers is numbers.Status.WRONG),
        f.stuffing,
        float(keyed),
        float(f.negated_any),
        max(f.neg, 0.0),
    ]


def estimate(d: Decision, keyed: bool, calibration: Calibration) -> float:
    """P(an expert credits the point) given what the stages found."""
    if d.verdict == "contradicted":
        return calibration.contradicted_rate
    if d.verdict != "hit" and d.facts is not None and d.facts.stuffed:
        return calibration.stuffed_rate
    return probability(features(d, keyed), calibration)


def kind(d: Decision) -> str:
    """Which estimate applies: 'contradicted', 'stuffed' or 'model' (the logistic)."""
    if d.verdict == "contradicted":
        return "contradicted"
    if d.verdict != "hit" and d.facts is not None and d.facts.stuffed:
        return "stuffed"
    return "model"


def probability(x: list[float], calibration: Calibration) -> float:
    c = calibration if calibration.features == FEATURES else _FALLBACK
    z = c.intercept + sum(w * v for w, v in zip(c.coefficients, x, strict=True))
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
