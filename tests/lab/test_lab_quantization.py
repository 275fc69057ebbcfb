"""The quantization lab: weight bytes measured from the tensors equal the formula exactly,
int4 < int8 < bf16, and perplexity is scored on the held-out text (hardest tenth apart)."""

from __future__ import annotations

import math

import pytest

import lab.labs.common as common
import lab.labs.quantization as quantization
from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.common import bundled_shape
from lab.labs.quantization import LAB, predicted_bytes

pytestmark = pytest.mark.usefixtures("one_thread")

# width 1: speed timed on the bundled model itself (small, fast); the default width 4 is the
# regime-true speed model (test_the_speed_model_leaves_the_last_level_cache_in_every_format)
TINY = {"group_size": "32", "windows": 10, "window_tokens": 32, "decode_tokens": 4, "width": 1}


def test_defaults_clean():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"windows": 5, "group_size": "48", "window_tokens": 4096})
    assert "at least 10" in err.value.errors["windows"]
    assert "32, 64, 128" in err.value.errors["group_size"]
    assert "at most 512" in err.value.errors["window_tokens"]


def test_a_group_that_does_not_divide_a_layer_is_refused(monkeypatch):
    shape = {**bundled_shape("target"), "intermediate_size": 704}  # 704 = 5.5 x 128
    monkeypatch.setattr(quantization, "bundled_shape", lambda name="target": shape)
    with pytest.raises(LabParamError) as err:
        LAB.clean({"group_size": "128"})
    message = err.value.errors["group_size"]
    assert "704" in message and "down_proj" in message and "32 or 64" in message
    assert LAB.clean({"group_size": "64"})["group_size"] == "64"


def test_predicted_bytes_by_hand():
    shape = {**bundled_shape("target"), "num_hidden_layers": 1, "vocab_size": 64,
             "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
             "num_key_value_heads": 1, "head_dim": 32}  # fmt: skip
    # q 64x64, k 32x64, v 32x64, o 64x64, gate/up 128x64, down 64x128 (lm_head stays bf16)
    linear = 64 * 64 * 2 + 32 * 64 * 2 + 128 * 64 * 3
    rows = 64 + 32 + 32 + 64 + 128 + 128 + 64
    other = 64 * 64 * 2 + 64 * 3  # embeddings + lm_head + 3 norms
    assert predicted_bytes(shape, 16, 32) == (linear + other) * 2
    assert predicted_bytes(shape, 8, 32) == linear + rows * 2 + other * 2
    groups = 64 * 64 * 2 // 32 + 32 * 64 * 2 // 32 + 128 * 64 * 2 // 32 + 64 * 128 // 32
    assert predicted_bytes(shape, 4, 32) == linear / 2 + groups * 2 * 2 + other * 2


def test_missing_heldout_text_fails_with_the_reason(monkeypatch):
    monkeypatch.setattr(common, "heldout_ids", lambda: None)
    with pytest.raises(RuntimeError, match="Held-out text unavailable"):
        list(LAB.run(RunContext(LAB.clean(TINY))))


def test_run_measures_the_predicted_bytes_and_scores_perplexity():
    params = LAB.clean(TINY)
    ctx = RunContext(params)
    points = list(LAB.run(ctx))
    declared = {s.name for s in LAB.series}
    assert {p.series for p in points} == declared - {"weight-mb-predicted"}  # from predict()
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
    by = {(p.series, p.x): p for p in points}
    predicted = {p.x: p.y for p in LAB.predict(params)}
    sizes = {}
    for bits in (16, 8, 4):
        weight = by[("weight-mb", bits)]
        assert weight.extra["bytes"] == predicted_bytes(bundled_shape("target"), bits, 32)
        assert weight.y == pytest.approx(predicted[bits], rel=1e-12)
        speed, floor = by[("ms-per-token", bits)], by[("ms-floor", bits)]
        # width 1 times the bundled model itself: same bytes; the floor is bytes / bandwidth
        assert speed.extra["weight_mb"] == pytest.approx(weight.y)
        gb_s = ctx.summary["read_bandwidth_gb_s"]
        assert floor.y == pytest.approx(weight.extra["bytes"] / (gb_s * 1e9) * 1000)
        assert speed.y > floor.y > 0 and speed.extra["predicted"] == floor.y
        assert speed.extra["achieved_gb_s"] == pytest.approx(weight.y / speed.y)
        sizes[bits] = weight.extra["bytes"]
        assert by[("ppl", bits)].extra["hard_windows"] == 1
    assert sizes[4] < sizes[8] < sizes[16]
    # The hardest windows were ranked by bf16 loss: harder than the average by construction.
    assert by[("ppl-hard", 16)].y > by[("ppl", 16)].y
    # int8 per channel barely moves perplexity on the trained model.
    assert by[("ppl", 8)].y == pytest.approx(by[("ppl", 16)].y, rel=0.02)
    assert ctx.summary["int4_weight_mb"] < ctx.summary["int8_weight_mb"]


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    with pytest.raises(LabCancelled):
        list(LAB.run(RunContext(LAB.clean(TINY), is_cancelled=cancelled)))


def test_the_speed_model_leaves_the_last_level_cache_in_every_format():
    import torch

    from lab.engine.dtypes import last_level_cache_bytes
    from lab.labs.common import LLC_MULTIPLE, matmul_params, random_model
    from lab.labs.quantization import speed_shape

    defaults = LAB.clean({})
    assert defaults["width"] == 4
    llc = last_level_cache_bytes()
    with torch.device("meta"):
        model = random_model(speed_shape(defaults["width"], llc), "meta")
    # int4 (half a byte a weight, the smallest format) is still 4x the cache
    assert matmul_params(model) * 0.5 >= LLC_MULTIPLE * llc
    assert speed_shape(1, llc) == bundled_shape("target")
    # the group sizes offered divide every layer of the speed model too
    for group in (32, 64, 128):
        assert all(m.in_features % group == 0 for m in model.modules()
                   if isinstance(m, torch.nn.Linear))  # fmt: skip
