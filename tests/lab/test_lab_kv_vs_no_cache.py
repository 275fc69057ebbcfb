"""The KV-cache vs recompute lab: bounds, the FLOP counts, and the uncached step growing
with the sequence while the cached one does not."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.common import bundled_shape, random_model
from lab.labs.kv_vs_no_cache import LAB, step_flops

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"prompt_tokens": 8, "new_tokens": 17, "every": 8}


def test_defaults_clean():
    assert LAB.clean({}) == LAB.defaults()


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"new_tokens": 497, "every": 0})
    assert "at most 496" in err.value.errors["new_tokens"]
    assert "at least 1" in err.value.errors["every"]


def test_cross_param_rules():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"prompt_tokens": 256, "new_tokens": 300})
    assert "at most 512" in err.value.errors["new_tokens"]
    with pytest.raises(LabParamError) as err:
        LAB.clean({"new_tokens": 16, "every": 16})
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
    # 16 decode steps in windows of 8: two points per mode, at the windows' median lengths
    assert sorted((p.series, p.x) for p in measured) == [
        ("cached", 12.5),
        ("cached", 20.5),
        ("none", 12.5),
        ("none", 20.5),
    ]
    for series in ("cached", "none"):
        predicted = {p.x: p.y for p in points if p.series == f"{series}-predicted"}
        first = min((p for p in measured if p.series == series), key=lambda p: p.x)
        assert math.isclose(predicted[first.x], first.y)  # the one fitted number: overhead
    s = ctx.summary
    assert s["total_flop_ratio_none_over_cached"] > 5
    assert s["cached_decode_total_ms"] > 0 and s["none_decode_total_ms"] > 0


def test_recompute_grows_with_the_prefix():
    # at ~300 tokens recompute does ~100x the FLOPs of a cached step; assert only 2x in time
    ctx, points = run_tiny(prompt_tokens=300, new_tokens=9, every=8)
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
