"""The tuned numbers of the pipeline, read from tuned.json.

tuned.json is written by `python -m bench.rubric_calibration --tune`, fitted on the TUNING
part of tests/data/rubric_eval/ only (questions whose slug hashes out of the held-out part).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

TUNED_PATH = Path(__file__).with_name("tuned.json")


@dataclass(frozen=True)
class Thresholds:
    retrieve: float = 0.40  # a unit this close to a point attempts it
    verify_floor: float = 0.45  # a unit must be this close to verify a point
    margin: float = 0.02  # closer to a claim than to every contradiction by this much
    contra_floor: float = 0.55  # a unit this close to a contradiction ...
    contra_margin: float = 0.05  # ... and closer to it than to the claims by this is suspect
    key_share: float = 1.0  # share of a point's key terms a verifying unit must carry
    plain_share: float = 0.34  # the same for a plain point's content words
    stuffed: float = 0.3  # from this stuffing level on, a unit is a list of terms, not a claim
    penalty_sim: float = 0.70  # red flags need a confident match
    numbers_required: bool = True  # a point that expects numbers is verified only with one
    off_topic: float = 0.35  # no unit this close to any point: the answer is off topic
    reader_floor: float = 0.0  # the point reader's P(states) a verifying unit needs (0: off)


@dataclass(frozen=True)
class Calibration:
    """Logistic model of P(an expert credits the point) from the stage features."""

    features: tuple[str, ...] = ()
    coefficients: tuple[float, ...] = ()
    intercept: float = 0.0
    # Refuted or stuffed evidence is not a matter of degree: their estimate is the share of
    # such points the experts credited on the tuning part.
    contradicted_rate: float = 0.1
    stuffed_rate: float = 0.1


@dataclass(frozen=True)
class Params:
    thresholds: Thresholds = field(default_factory=Thresholds)
    calibration: Calibration = field(default_factory=Calibration)

    def as_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}


def load(path: Path = TUNED_PATH) -> Params:
    if not path.exists():
        return Params()
    data = json.loads(path.read_text())
    return Params(
        Thresholds(**_known(Thresholds, data.get("thresholds", {}))),
        Calibration(**_known(Calibration, data.get("calibration", {}))),
    )


TUNED = load()
