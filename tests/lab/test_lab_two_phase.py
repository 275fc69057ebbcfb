"""The two-phase lab: bounds, the roofline drawn from the measured machine constants, and
prefill time growing with the prompt."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.common import bundled_shape, random_model
from lab.labs.two_phase import LAB, doubling, matmul_params, widened_shape

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"max_prompt_tokens": 64, "max_batch": 4, "repeats": 1}


def test_defaults_clean():
    assert LAB.clean({}) == LAB.defaults()


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_batch": 129, "max_prompt_tokens": 8, "dtype": "int8"})
    assert "at most 128" in err.value.errors["max_batch"]
    assert "at least 16" in err.value.errors["max_prompt_tokens"]
    assert "fp32, bf16, fp16" in err.value.errors["dtype"]


def test_wide_model_limits_the_prompt():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"width": 3, "max_prompt_tokens": 1024})
    assert "at most 512" in err.value.errors["max_prompt_tokens"]
    assert LAB.clean({"width": 2, "max_prompt_tokens": 1024})["width"] == 2


def test_doubling_ends_at_the_limit():
    assert doubling(16, 100) == [16, 32, 64, 100]
    assert doubling(1, 64) == [1, 2, 4, 8, 16, 32, 64]


def test_matmul_params_counts_every_linear():
    s = bundled_shape("target")
    h, inter, hd = s["hidden_size"], s["intermediate_size"], s["head_dim"]
    attn = h * hd * (2 * s["num_attention_heads"] + 2 * s["num_key_value_heads"])
    per_layer = attn + 3 * h * inter
    expected = s["num_hidden_layers"] * per_layer + h * s["vocab_size"]
    assert matmul_params(random_model(s)) == expected
    assert matmul_params(random_model(widened_shape(2))) > 3.5 * expected  # ~width²


def run_tiny(**over):
    ctx = RunContext(LAB.clean({**TINY, **over}))
    return ctx, list(LAB.run(ctx))


def test_run_yields_declared_finite_points_on_the_roofline():
    ctx, points = run_tiny()
    assert {p.series for p in points} == {s.name for s in LAB.series}
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y) and p.y > 0
    s = ctx.summary
    flop_s, bandwidth = s["matmul_gflop_s"] * 1e9, s["read_bandwidth_gb_s"] * 1e9
    weight_bytes = s["weight_mb"] * 1e6
    assert weight_bytes == s["matmul_params"] * 4  # fp32
    for p in points:
        if p.series.endswith("roofline"):  # max(weights / bandwidth, 2·params·tokens / FLOP/s)
            expected = max(weight_bytes / bandwidth, 2 * s["matmul_params"] * p.x / flop_s)
            assert math.isclose(p.y, expected * 1000, rel_tol=1e-9)
    measured = {(p.series, p.x): p for p in points if "roofline" not in p.series}
    assert set(measured) == {("prefill", 16), ("prefill", 32), ("prefill", 64),
                             ("decode", 1), ("decode", 2), ("decode", 4)}  # fmt: skip
    for p in measured.values():
        assert p.extra["predicted"] > 0
    assert measured[("prefill", 64)].extra["ttft_ms"] >= measured[("prefill", 64)].y * 0.99
    assert s["tpot_ms_batch_1"] == measured[("decode", 1)].y


def test_long_prompts_take_longer_to_prefill():
    # 512 vs 16 tokens: ~30x the FLOPs; asserting only 2x leaves room for a noisy machine
    ctx, points = run_tiny(max_prompt_tokens=512, max_batch=1, repeats=3)
    prefill = {p.x: p.y for p in points if p.series == "prefill"}
    assert prefill[512] > 2 * prefill[16]
    assert ctx.summary["ttft_growth_16_to_longest_prompt"] > 2


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    ctx = RunContext(LAB.clean(TINY), is_cancelled=cancelled)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))
