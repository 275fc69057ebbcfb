"""Stage 4: the calibrated probability that an expert credits the point.

A small logistic model over the verify stage's features, fitted on the tuning part of
the evaluation set (bench/rubric_calibration.py --tune) and stored in tuned.json.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

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
    "answer_verified",  # share of the answer's ordinary points verified
    "answer_doubt",  # share of them read close to a wrong version, or with a wrong number
)
# The point reader's readings (Retrieval.reading) are to join these once a reader ships
# that holds on unseen questions (bench/rubric_reader.py; none does yet: BENCHMARKS).
# Until tuned: a hit is likely credited, an unclear point somewhat, the rest not.
_FALLBACK = Calibration(
    FEATURES, (4.0, 2.0, 1.0, 2.0, -2.0, 0.5, -1.0, -1.0, 0.0, -0.5, 0.0, 0.0, 0.0), -3.0
)
# (the fallback only serves until tuned.json exists; tests run with tuned.json)


def answer_context(decisions: Sequence[Decision], penalty: Sequence[bool]) -> tuple[float, float]:
    """(share verified, share in doubt) of an answer's ordinary points: an interviewer reads
    a vague sentence in an answer that gets most points right otherwise than the same
    sentence in one that reads wrong on several (close to a known wrong version, a number
    outside every assumption, a denial)."""
    ordinary = [d for d, pen in zip(decisions, penalty, strict=True) if not pen]
    if not ordinary:
        return 0.0, 0.0
    verified = sum(d.verdict == "hit" for d in ordinary)
    doubt = sum(
        d.verdict == "contradicted"
        or (d.facts is not None and (d.facts.suspect or d.facts.numbers is numbers.Status.WRONG))
        for d in ordinary
    )
    return verified / len(ordinary), doubt / len(ordinary)


def features(d: Decision, keyed: bool, context: tuple[float, float] = (0.0, 0.0)) -> list[float]:
    f = d.facts
    if f is None:
        return [0.0] * (len(FEATURES) - 2) + list(context)
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
        *context,
    ]


def estimate(
    d: Decision, keyed: bool, calibration: Calibration, context: tuple[float, float] = (0.0, 0.0)
) -> float:
    """P(an expert credits the point) given what the stages found (`context`: the answer's
    answer_context)."""
    if d.verdict == "contradicted":
        return calibration.contradicted_rate
    if d.verdict != "hit" and d.facts is not None and d.facts.stuffed:
        return calibration.stuffed_rate
    return probability(features(d, keyed, context), calibration)


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
