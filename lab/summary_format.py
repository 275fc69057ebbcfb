"""A run's summary as a person reads it: each number with its unit (from the key's unit
suffix, as the labs name them: `ttft_ms`, `read_bandwidth_gb_s`, `weight_mb`), at a sensible
precision; the verdicts and strings as they are. Used for the first render and for every
status the stream sends, so a reload shows the same text as the live page."""

from __future__ import annotations

import math
from typing import Any

# (key suffix, unit) — the longest matching suffix wins.
UNITS = (
    ("_tokens_per_s", "tok/s"), ("_tok_s", "tok/s"), ("_gflop_s", "GFLOP/s"),
    ("_gb_s", "GB/s"), ("_gflop", "GFLOP"), ("_ms", "ms"), ("_ms_predicted", "ms"),
    ("_ms_per_step", "ms"), ("_mib", "MiB"), ("_mb", "MB"), ("_pct", "%"), ("_s", "s"),
    ("_req_s", "req/s"), ("_ratio", "×"), ("_fraction", "×"), ("_predicted", ""),
)  # fmt: skip
RATIO_WORDS = ("ratio", "fraction", "growth", "_over_", "speedup")


def unit_for(key: str) -> str:
    """The unit a summary key names by its suffix ('' when none)."""
    matches = [(len(s), u) for s, u in UNITS if key.endswith(s)]
    if matches:
        unit = max(matches)[1]
        if unit:
            return unit
    if key.endswith("_ms_predicted") or "_ms_" in key:
        return "ms"
    return "×" if any(w in key for w in RATIO_WORDS) else ""


def number(value: float) -> str:
    """3 significant figures, thousands separated; integers as they are."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 1 or magnitude == 0:
        return f"{value:.3g}" if magnitude < 10 else f"{value:.1f}"
    return f"{value:.3g}"


def summary_rows(summary: dict[str, Any] | None) -> list[list[str]]:
    """[[label, text]] for the summary table (verdicts are shown apart)."""
    rows = []
    for key, value in (summary or {}).items():
        if key == "verdicts":
            continue
        label = key.replace("_", " ")
        if isinstance(value, (int, float)):
            unit = unit_for(key)
            text = number(value) + ("" if not unit else unit if unit in ("×", "%") else f" {unit}")
        elif isinstance(value, (list, dict)):
            text = ", ".join(map(str, value.values() if isinstance(value, dict) else value))
        else:
            text = str(value)
        rows.append([label, text])
    return rows


# What a run measured before its first point (device constants, a lab's own calibration,
# the warm-up it discarded): sent while the run runs, not only at its end.
LIVE_KEYS = ("constants", "calibration", "warmup")


def live_summary(summary: dict[str, Any] | None) -> dict[str, Any]:
    """The LIVE_KEYS a running lab has filled in so far."""
    return {k: summary[k] for k in LIVE_KEYS if summary and k in summary}


def constants_line(summary: dict[str, Any] | None) -> str:
    """One line under the chart: the constants the prediction used ("" before they exist)."""
    parts = [str(summary[k]) for k in ("constants", "calibration") if summary and summary.get(k)]
    return " · ".join(parts)
