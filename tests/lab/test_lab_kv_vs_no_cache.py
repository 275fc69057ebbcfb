"""The KV-cache vs recompute lab: bounds, the FLOP counts, and the uncached step growing
with the sequence while the cached one does not."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch

from lab.conditions import Meter
from lab.labs import kv_vs_no_cache
from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.calibration import CalibrationError
from lab.labs.common import bundled_shape, random_model
from lab.labs.kv_vs_no_cache import (
    LAB,
    calibrate_steps,
    calibration_lengths,
    step_flops,
)
from lab.labs.verdicts import contention, judge, pairs

pytestmark = pytest.mark.usefixtures("one_thread")

# width 1, fp32: the bundled shape, small and fast (the default, width 4 and the measured
# dtype, is the regime-true size: test_the_default_model_leaves_the_last_level_cache)
TINY = {"prompt_tokens": 8, "new_tokens": 17, "every": 8, "width": 1, "dtype": "fp32"}


def test_defaults_clean():
    assert LAB.clean({}) == LAB.defaults()


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"new_tokens": 497, "every": 0})
    assert "at most 496" in err.value.errors["new_tokens"]
    assert "at least 3" in err.value.errors["every"]  # a median of >= 3 steps


def test_cross_param_rules():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"prompt_tokens": 256, "new_tokens": 300})
    assert "at most 512" in err.value.errors["new_tokens"]
    with pytest.raises(LabParamError) as err:
        LAB.clean({"new_tokens": 16, "every": 8})  # no window left after the warm-up
    assert "every" in err.value.errors


def test_step_flops_by_hand():
    model = random_model(bundled_shape("target"))
    c = model.config
    layer = c.num_hidden_layers * (
        c.hidden_size * c.head_dim * 2 * (c.num_attention_heads + c.num_key_value_heads)
        + 3 * c.hidden_size * c.intermediate_size
    )
    lm_head = c.hidden_size * c.vocab_size
    attn = 4 * c.num_hidden_layers * c.num_attention_heads * c.head_dim  # per (query, key)
    assert step_flops(model, "cached", 100) == 2 * layer + 2 * lm_head + attn * 100
    assert step_flops(model, "none", 100) == 2 * layer * 100 + 2 * lm_head + attn * 5050
    # recompute: ~linear in the prefix per step; cached: ~constant
    assert step_flops(model, "none", 200) / step_flops(model, "none", 100) > 2
    assert step_flops(model, "cached", 200) / step_flops(model, "cached", 100) < 1.1


def run_tiny(**over):
    ctx = RunContext(LAB.clean({**TINY, **over}))
    return ctx, list(LAB.run(ctx))


def test_run_yields_declared_finite_points():
    ctx, points = run_tiny()
    assert {p.series for p in points} == {s.name for s in LAB.series}
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y) and p.y >= 0
    measured = [p for p in points if p.series in ("cached", "none")]
    # 16 decode steps in windows of 8: the first is warm-up, one point per mode at the
    # second window's median length
    assert sorted((p.series, p.x) for p in measured) == [("cached", 20.5), ("none", 20.5)]
    for series in ("cached", "none"):
        predicted = {p.x: p.y for p in points if p.series == f"{series}-predicted"}
        first = min((p for p in measured if p.series == series), key=lambda p: p.x)
        assert math.isclose(predicted[first.x], first.y)  # the one fitted number: overhead
    s = ctx.summary
    assert s["total_flop_ratio_none_over_cached"] > 5
    assert s["cached_decode_total_ms"] > 0 and s["none_decode_total_ms"] > 0


def test_recompute_grows_with_the_prefix():
    # at ~300 tokens recompute does ~100x the FLOPs of a cached step; assert only 2x in time
    ctx, points = run_tiny(prompt_tokens=300, new_tokens=17, every=8)
    by = {p.series: p for p in points if p.series in ("cached", "none")}
    assert by["none"].y > 2 * by["cached"].y
    assert by["none"].extra["gflop_per_step"] > 50 * by["cached"].extra["gflop_per_step"]
    assert ctx.summary["total_time_ratio_none_over_cached"] > 2


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    ctx = RunContext(LAB.clean(TINY), is_cancelled=cancelled)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))


def test_no_cache_prediction_grows_at_least_linearly_with_position():
    # the predictor's shape alone: overhead + FLOPs x s/FLOP, for any positive slope
    model = random_model(bundled_shape("target"))
    xs = list(range(17, 500, 16))
    none = [step_flops(model, "none", x) for x in xs]
    steps = [b - a for a, b in itertools.pairwise(none)]
    assert all(d > 0 for d in steps)  # monotone in position
    assert all(b >= a for a, b in itertools.pairwise(steps))  # at least linear
    cached = [step_flops(model, "cached", x) for x in xs]
    # one new token per step: grows only by attention over the cache, far slower
    assert cached[-1] / cached[0] < 1.5 < none[-1] / none[0] / 10


def test_a_loaded_calibration_is_refused_not_clamped(monkeypatch):
    # the warm-up outlier of issue 21: the shortest forward timed slowest -> slope <= 0
    # (no-cache forward, cached step) per length, as round_robin returns them
    forward = [[0.9] * 3, [0.05] * 3, [0.06] * 3, [0.04] * 3]
    timings = [t for pair in zip(forward, [[0.002] * 3] * 4, strict=True) for t in pair]
    monkeypatch.setattr(kv_vs_no_cache, "round_robin", lambda *a, **k: timings)
    model = random_model(bundled_shape("target"))
    with pytest.raises(CalibrationError) as err:
        calibrate_steps(model, "cpu", calibration_lengths(200))
    assert "did not take longer" in str(err.value)


def test_a_small_run_lands_inside_twice_the_declared_band():
    meter = Meter.start()
    ctx, points = run_tiny(prompt_tokens=16, new_tokens=96, every=8)
    contended = contention(meter.end_record())  # on a shared machine: stated, not failed
    assert "GFLOP/s" in ctx.summary["calibration"] and ctx.summary["warmup"]
    assert "per context token" in ctx.summary["calibration"]
    for name, rows in pairs(LAB, points).items():
        series = LAB.series_by_name()[name]
        verdict = judge(replace(series, band=2 * series.band), rows, contended)
        assert verdict.status in (("held", "inconclusive") if contended else ("held",)), (
            verdict.text
        )
    for p in points:
        if p.series in ("cached", "none"):
            assert p.extra["lo"] <= p.y <= p.extra["hi"] and p.extra["repeats"] >= 3


def test_the_cached_step_is_priced_per_context_token_beyond_its_flops(monkeypatch):
    model = random_model(bundled_shape("target"))
    lengths = [16, 64, 128]
    flops = [step_flops(model, "none", n) for n in lengths]
    # forwards at 20 GFLOP/s + 1 ms; cached steps 2 ms + 10 µs per context token
    forward = [[1e-3 + f / 20e9] * 3 for f in flops]
    cached = [[2e-3 + 1e-5 * n + step_flops(model, "cached", n) / 20e9] * 3 for n in lengths]
    timings = [t for pair in zip(forward, cached, strict=True) for t in pair]
    monkeypatch.setattr(kv_vs_no_cache, "round_robin", lambda *a, **k: timings)
    s_per_flop, per_ctx_ms, timed = calibrate_steps(model, "cpu", lengths)
    assert s_per_flop == pytest.approx(1 / 20e9)
    assert per_ctx_ms == pytest.approx(0.01)
    assert timed["lengths"] == lengths and len(timed["cached_ms"]) == 3
    # a flat cached step: no per-context cost, never a negative one
    flat = [[2e-3] * 3 for _ in lengths]
    timings[1::2] = flat
    assert calibrate_steps(model, "cpu", lengths)[1] == 0.0


def test_each_mode_has_its_roofline_bound_at_every_measured_length():
    from lab.labs.formulas import step_lower_bound_ms

    ctx, points = run_tiny()
    weight_bytes = ctx.summary["weight_mb"] * 1e6
    model = random_model(bundled_shape("target"))
    assert weight_bytes == pytest.approx(
        sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)) * 4
    )
    constants = ctx.summary["constants"]
    assert "matrix-vector" in constants and "GFLOP/s" in constants
    measured = {(p.series, p.x) for p in points if p.series in ("cached", "none")}
    bounds = {(p.series.removesuffix("-roofline"), p.x): p for p in points
              if p.series.endswith("-roofline")}  # fmt: skip
    assert measured <= set(bounds)
    for (mode, x), p in bounds.items():
        # the bound is the larger of the weight stream and the step's FLOPs at the matmul rate
        assert p.y >= step_lower_bound_ms(weight_bytes, math.inf, step_flops(model, mode, x), 1e30)
    # the recompute's bound grows with the prefix, the cached step's hardly
    xs = sorted(x for m, x in bounds if m == "none")
    assert bounds[("none", xs[-1])].y >= bounds[("cached", xs[-1])].y


def test_the_estimate_and_the_bound_are_judged_each_on_its_own_points():
    _, points = run_tiny()
    rows = pairs(LAB, points)
    for mode in ("cached", "none"):
        bound = {p.x: p.y for p in points if p.series == f"{mode}-roofline"}
        estimate = {p.x: p.y for p in points if p.series == f"{mode}-predicted"}
        assert [(x, pred) for x, _, pred in rows[f"{mode}-roofline"]] == [
            (x, bound[x]) for x, _, _ in rows[f"{mode}-roofline"]
        ]
        for x, _, pred in rows[f"{mode}-predicted"]:
            assert pred == pytest.approx(estimate[x])
            assert pred != pytest.approx(bound[x])


def test_the_default_model_leaves_the_last_level_cache():
    from lab.engine.dtypes import last_level_cache_bytes
    from lab.labs.common import LLC_MULTIPLE, lab_shape, matmul_params

    defaults = LAB.clean({})
    assert (defaults["width"], defaults["dtype"]) == (4, "auto")
    llc = last_level_cache_bytes()
    for dtype_bytes in (4, 2):
        shape = lab_shape(defaults["width"], dtype_bytes, llc)
        with torch.device("meta"):
            weights = matmul_params(random_model(shape, "meta")) * dtype_bytes
        assert weights >= LLC_MULTIPLE * llc
    assert lab_shape(1, 4, llc) == bundled_shape("target")
