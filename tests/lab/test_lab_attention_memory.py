"""The attention-memory lab: the tiled online softmax is exact, and the allocator's peak
matches the score-matrix arithmetic."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lab.labs.attention_memory import LAB, naive_attention, peak_bytes, tiled_attention
from lab.labs.base import LabCancelled, LabParamError, RunContext

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"min_seq_len": 64, "max_seq_len": 256, "heads": 2, "head_dim": 16, "block": 32}


def test_defaults_clean():
    assert LAB.clean({}) == LAB.defaults()


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"heads": 65, "block": 4})
    assert "at most 64" in err.value.errors["heads"]
    assert "at least 8" in err.value.errors["block"]


def test_cross_param_rules():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"min_seq_len": 512, "max_seq_len": 256})
    assert "min_seq_len" in err.value.errors
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_seq_len": 16384, "heads": 8})  # 8 GiB of fp32 scores
    assert "GiB" in err.value.errors["max_seq_len"]


@pytest.mark.parametrize("n, block", [(100, 32), (64, 64), (50, 128)])
def test_tiled_equals_sdpa(n, block):
    gen = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(3, n, 16, generator=gen) for _ in range(3))
    reference = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(naive_attention(q, k, v), reference, atol=1e-5)
    assert torch.allclose(tiled_attention(q, k, v, block), reference, atol=1e-5)


def test_peak_bytes_sees_a_temporary():
    _, peak, _ = peak_bytes(lambda: torch.ones(1000).sum(), "cpu")
    assert peak >= 4000  # the 1,000 floats existed, even though they were freed


def test_predicted_is_the_arithmetic():
    points = LAB.predict(LAB.clean(TINY))
    by = {(p.series, p.x): p.y for p in points}
    assert by[("naive-predicted", 128)] == 2 * 128**2 * 4
    assert by[("tiled-predicted", 128)] == 2 * 128 * 32 * 4


def run_tiny(**over):
    ctx = RunContext(LAB.clean({**TINY, **over}))
    return ctx, list(LAB.run(ctx))


def test_run_measures_the_predicted_bytes():
    ctx, points = run_tiny()
    assert {p.series for p in points} == {s.name for s in LAB.series} - {
        "naive-predicted",
        "tiled-predicted",
    }  # drawn by predict()
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
    block = TINY["block"]
    for p in points:
        if p.series == "naive":  # exactly the N x N matrix per head
            assert p.y == p.extra["predicted"]
        elif p.series == "tiled":  # the tile, plus a few per-row vectors (heads x N each)
            assert p.extra["predicted"] <= p.y <= p.extra["predicted"] * (1 + 6 / block)
        else:
            assert p.y < 1e-5
    naive = {p.x: p.y for p in points if p.series == "naive"}
    tiled = {p.x: p.y for p in points if p.series == "tiled"}
    assert naive[256] / tiled[256] > 6  # N / block = 8, less the row vectors
    assert ctx.summary["max_abs_diff"] < 1e-5


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    ctx = RunContext(LAB.clean(TINY), is_cancelled=cancelled)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))
