"""The two-phase lab: bounds, the roofline drawn from the measured machine constants, and
prefill time growing with the prompt."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from lab.conditions import Meter
from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.common import bundled_shape, matmul_params, random_model, widened_shape
from lab.labs.two_phase import (
    DECODE_PROMPT_TOKENS,
    LAB,
    decode_flops,
    doubling,
    prefill_flops,
)
from lab.labs.verdicts import contention, judge, pairs

pytestmark = pytest.mark.usefixtures("one_thread")

# width 1, fp32: the bundled shape, small and fast (the default, width 4 and the measured
# dtype, is the regime-true size: test_the_default_model_leaves_the_last_level_cache)
TINY = {"max_prompt_tokens": 64, "max_batch": 4, "repeats": 3, "width": 1, "dtype": "fp32"}


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
    flop_s, bandwidth = s["matmul_gflop_s"] * 1e9, s["weight_stream_gb_s"] * 1e9
    weight_bytes = s["weight_mb"] * 1e6
    assert weight_bytes == s["matmul_params"] * 4  # fp32
    model = random_model(bundled_shape("target"))
    for p in points:
        if p.series.endswith("roofline"):  # max(weights / bandwidth, step FLOPs / FLOP/s)
            flops = (prefill_flops(model, p.x) if p.series.startswith("prefill")
                     else decode_flops(model, p.x, DECODE_PROMPT_TOKENS + 1))  # fmt: skip
            expected = max(weight_bytes / bandwidth, flops / flop_s)
            assert math.isclose(p.y, expected * 1000, rel_tol=1e-9)
    assert "matrix-vector" in s["constants"] and "GFLOP/s" in s["constants"]
    measured = {(p.series, p.x): p for p in points if "roofline" not in p.series}
    assert set(measured) == {("prefill", 16), ("prefill", 32), ("prefill", 64),
                             ("decode", 1), ("decode", 2), ("decode", 4)}  # fmt: skip
    for p in measured.values():
        assert p.extra["predicted"] > 0
        assert p.extra["lo"] <= p.y <= p.extra["hi"] and p.extra["repeats"] >= 3
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


def test_the_bounds_count_only_the_work_a_step_does():
    model = random_model(bundled_shape("target"))
    lm_head = model.lm_head.weight.numel()
    linear = matmul_params(model)
    # a prefill samples one row: the LM head once, not once per prompt token (the old
    # 2·params·tokens overstated a 512-token prefill and measured "beat" the bound)
    assert prefill_flops(model, 512) < 2 * linear * 512
    assert prefill_flops(model, 512) > 2 * (linear - lm_head) * 512
    # decode samples every sequence; prefill work is at least linear in the prompt
    assert decode_flops(model, 8, 17) > 8 * 2 * lm_head
    per_token = [prefill_flops(model, n) / n for n in (16, 64, 256, 1024)]
    assert per_token == sorted(per_token)


def test_a_small_run_respects_its_bounds_within_twice_the_noise_band():
    meter = Meter.start()
    _, points = run_tiny(max_prompt_tokens=128, max_batch=8)
    contended = contention(meter.end_record())
    for name, rows in pairs(LAB, points).items():
        series = LAB.series_by_name()[name]
        verdict = judge(replace(series, band=2 * series.band), rows, contended)
        assert verdict.status in (("held", "inconclusive") if contended else ("held",)), (
            verdict.text
        )


def test_the_default_model_leaves_the_last_level_cache():
    from lab.engine.dtypes import last_level_cache_bytes
    from lab.labs.common import LLC_MULTIPLE, regime_shape

    defaults = LAB.clean({})
    assert (defaults["width"], defaults["dtype"]) == (4, "auto")
    llc = last_level_cache_bytes()
    for dtype_bytes in (4, 2):
        shape = regime_shape(defaults["width"], dtype_bytes, llc)
        weights = matmul_params(random_model(shape)) * dtype_bytes
        assert weights >= LLC_MULTIPLE * llc
    # a narrow model is not stretched to hundreds of layers: it stays the small demo
    assert regime_shape(1, 4, llc)["num_hidden_layers"] == bundled_shape()["num_hidden_layers"]


def test_an_auto_dtype_run_says_which_dtype_ran_and_why():
    ctx, _ = run_tiny(dtype="auto")
    why = ctx.summary["dtype"]
    assert why.split(":")[0] in ("fp32", "bf16", "fp16")
    assert "fastest correct dtype" in why and "ms per 128+128-token request" in why
    assert "random weights" in ctx.summary["model"]
