"""A verdict per predicted series when a run ends: did the prediction hold?

Each predicted `Series` declares its claim (base.Series.claim):
- exact: counted quantities (bytes, tokens, blocks); every point must match within `band`
  (0 by default: equal up to float rounding).
- bound: a lower bound on the measured value (upper when `bound_side` is "upper"); the
  measured may not beat it by more than `band` (noise). Beating a bound by more than 1.2×
  is a bug in the model, not a lesson. A held bound is "tight" when its median point is within
  TIGHT× of it, and "loose" beyond, with the reason and what would tighten it: a bound 10×
  from its measurement bounds it without predicting it.
- estimate: measured / predicted within ±band on the median point; the worst is reported.

Under contention (more runnable threads than cores, or the run got little CPU) a missed
estimate or bound is reported as inconclusive, with the numbers, instead of failing it.
Exact claims do not depend on timing, so contention never excuses them.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lab.labs.base import Lab, Point, Series

EXACT_TOLERANCE = 1e-9  # relative: float rounding, not a band
BOUND_BUG = 1.2  # beating a bound by more than this is a bug in the model
TIGHT = 2.0  # a held bound is tight when its median point is within this factor of it
GENERIC_LOOSE = (
    "costs the bound leaves out dominate the step (per-step Python and kernel "
    "launches, cache-resident weights, a model too small to reach the regime); a "
    "larger model, or the rate the kernel really reaches, would tighten it"
)


@dataclass(frozen=True)
class Verdict:
    series: str  # the predicted series
    claim: str
    band: float
    points: int
    median_ratio: float  # measured / predicted
    worst_ratio: float  # the point furthest from holding
    worst_x: float
    status: str  # held | missed | inconclusive | no points
    text: str
    tightness: str = ""  # held bounds: tight | loose

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def contention(conditions: Mapping[str, Any] | None) -> str:
    """Why the run's timings may be disturbed, from lab.conditions' record ("" when not)."""
    if not conditions:
        return ""
    cpus = conditions.get("cpus") or 1
    loads = [v[0] for v in (conditions.get("load_start"), conditions.get("load_end")) if v]
    reasons = []
    if loads and max(loads) > cpus + 0.5:
        reasons.append(f"load average {max(loads):.2f} on {cpus} cores")
    share, threads = conditions.get("cpu_share_pct"), conditions.get("torch_threads") or 1
    if share is not None and share < 60 * min(threads, cpus):
        reasons.append(f"the run got {share:.0f} % CPU with {threads} torch threads")
    return "; ".join(reasons)


def _predicted_at(series: list[Point], x: float) -> float | None:
    """The predicted series at x: exact x, else linear between its neighbours."""
    pts = sorted(series, key=lambda p: p.x)
    for a, b in itertools.pairwise(pts):
        if a.x <= x <= b.x and b.x > a.x:
            return a.y + (x - a.x) / (b.x - a.x) * (b.y - a.y)
    return next((p.y for p in pts if p.x == x), None)


def pairs(lab: Lab, points: Iterable[Point]) -> dict[str, list[tuple[float, float, float]]]:
    """{predicted series: [(x, measured, predicted)]}, pairing each measured point with its
    own extra["predicted"] or else the predicted series at the same x. A measured series
    that several predicted series are for (an estimate and a bound) is paired with each
    one's own points: its extra["predicted"] cannot say which of them it is."""
    points = list(points)
    by_series: dict[str, list[Point]] = {}
    for p in points:
        by_series.setdefault(p.series, []).append(p)
    predictors: dict[str, int] = {}
    for s in lab.series:
        if s.kind == "predicted" and s.predicts:
            predictors[s.predicts] = predictors.get(s.predicts, 0) + 1
    out: dict[str, list[tuple[float, float, float]]] = {}
    for s in lab.series:
        if s.kind != "predicted" or not s.predicts:
            continue
        rows = out.setdefault(s.name, [])
        for m in by_series.get(s.predicts, []):
            pred = None
            if predictors[s.predicts] == 1 and isinstance(m.extra, dict):
                pred = m.extra.get("predicted")
            if not isinstance(pred, (int, float)):
                pred = _predicted_at(by_series.get(s.name, []), m.x)
            if pred is not None:
                rows.append((m.x, m.y, float(pred)))
    return out


def _ratio(measured: float, predicted: float) -> float:
    if predicted == 0:
        return 1.0 if measured == 0 else math.inf
    return measured / predicted


def judge(series: Series, rows: list[tuple[float, float, float]], contended: str = "",
          cause: str = "", loose: str = "") -> Verdict:  # fmt: skip
    """The verdict on one predicted series from its (x, measured, predicted) rows."""
    claim, band = series.claim or "estimate", series.band
    tightness = ""  # held bounds only: tight | loose
    if not rows:
        return Verdict(series.name, claim, band, 0, math.nan, math.nan, math.nan,
                       "no points", "no measured point to compare")  # fmt: skip
    ratios = [(_ratio(m, p), x) for x, m, p in rows]
    median = statistics.median(r for r, _ in ratios)
    if claim == "exact":
        worst, wx = max(ratios, key=lambda rx: abs(rx[0] - 1))
        ok = abs(worst - 1) <= max(band, EXACT_TOLERANCE)
        text = ("matched exactly" if band == 0 else f"matched within ±{band:.0%}") if ok else (
            f"differs: measured / predicted {worst:.4g} at x={wx:g}; an exact count must "
            "match — a bug in the lab or the formula")  # fmt: skip
        return Verdict(series.name, claim, band, len(rows), median, worst, wx,
                       "held" if ok else "missed", text)  # fmt: skip
    if claim == "bound":
        # beat = how far the measured value went past the bound (> 1 means past it)
        upper = series.bound_side == "upper"
        beats = [((r if upper else 1 / r) if r > 0 else math.inf, x) for r, x in ratios]
        beat, wx = max(beats)
        worst = beat if upper else 1 / beat
        ok = beat <= 1 + band
        if ok:
            closest = 1 / beat if beat > 0 else math.inf
            side = "below" if upper else "above"
            text = f"held: measured stayed {side} the bound (closest {closest:.2f}× at x={wx:g})"
            typical = (1 / median if upper else median) if median > 0 else math.inf
            if typical <= TIGHT:
                tightness = "tight"
                text += f"; tight: the median point is {typical:.2f}× the bound"
            else:
                tightness = "loose"
                text += (f"; loose: the median point is {typical:.1f}× the bound, so it "
                         "bounds the measurement without predicting it — "
                         f"{loose or GENERIC_LOOSE}")  # fmt: skip
        else:
            why = cause or (
                "the model counts work the step skips, or its constants were measured "
                "slower than the step ran"
            )
            text = f"measured beat the bound by {beat:.2f}× at x={wx:g} — likely cause: {why}"
            if beat > BOUND_BUG:
                text += " (more than 1.2×: a bug in the model, not noise)"
    else:
        worst, wx = max(ratios, key=lambda rx: abs(math.log(rx[0])) if rx[0] > 0 else math.inf)
        ok = abs(median - 1) <= band
        dev = abs(median - 1)
        if ok:
            text = (f"held within ±{dev:.0%} (median; band ±{band:.0%}); worst point "
                    f"{worst:.2f}× at x={wx:g}")  # fmt: skip
        else:
            text = (f"missed: median measured / predicted {median:.2f}× (band ±{band:.0%}), "
                    f"worst {worst:.2f}× at x={wx:g} — likely cause: "
                    f"{cause or 'a cost the model leaves out'}")  # fmt: skip
    status = "held" if ok else "missed"
    if not ok and contended:
        status = "inconclusive"
        text += f"; measured under contention ({contended}), so not a verdict on the model"
    return Verdict(series.name, claim, band, len(rows), median, worst, wx, status, text,
                   tightness)  # fmt: skip


def judge_run(lab: Lab, points: Iterable[Point],
              conditions: Mapping[str, Any] | None = None) -> list[Verdict]:  # fmt: skip
    """A verdict for every predicted series of `lab` from a run's points."""
    contended = contention(conditions)
    by_name = lab.series_by_name()
    return [judge(by_name[name], rows, contended, lab.miss_cause(name), lab.loose_cause(name))
            for name, rows in pairs(lab, points).items()]  # fmt: skip
