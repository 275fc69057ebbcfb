"""The cancellation lab: a departed client's tokens and KV, with and without abort."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.cancellation import LAB, workload

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"requests": 3, "max_tokens": 14, "others_max_tokens": 6, "disconnect_after": 3,
        "prompt_tokens": 4, "block_size": 2, "seed": 1}  # fmt: skip


def test_defaults_clean():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"requests": 65, "detect": "never"})
    assert "at most 64" in err.value.errors["requests"]
    assert "next-token" in err.value.errors["detect"]


def test_cross_param_rules():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_tokens": 50, "others_max_tokens": 60, "disconnect_after": 50})
    assert set(err.value.errors) == {"disconnect_after", "others_max_tokens"}
    with pytest.raises(LabParamError) as err:
        LAB.clean({"prompt_tokens": 100, "max_tokens": 450})
    assert "512" in err.value.errors["max_tokens"]


def test_workload():
    tokens = workload(LAB.clean(TINY))
    assert tokens[0] == 14 and len(tokens) == 3
    assert all(4 <= n <= 6 for n in tokens[1:])


def run_tiny(**over):
    ctx = RunContext(LAB.clean({**TINY, **over}))
    return ctx, list(LAB.run(ctx))


def test_abort_stops_the_waste_and_frees_the_blocks():
    ctx, points = run_tiny()
    assert {p.series for p in points} == {"naive", "abort", "naive-blocks", "abort-blocks"}
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
        if "predicted" in p.extra:
            assert p.y == p.extra["predicted"]
    s = ctx.summary
    assert s["naive_wasted_tokens"] == 14 - 3  # decoded to max_tokens for nobody
    assert s["abort_wasted_tokens"] == 1  # the token whose write failed
    assert s["naive_steps_carrying_departed"] == 11 and s["abort_steps_carrying_departed"] == 1
    # After a step, a sequence with g tokens generated holds KV for prompt + g - 1 tokens.
    # At abort g = k + 1 = 4: ceil((4 + 3) / 2) blocks, all freed at once.
    assert s["abort_blocks_held"] == 4
    assert s["blocks_after_abort"] == s["blocks_before_abort"] - 4
    naive_blocks = [p.y for p in points if p.series == "naive-blocks"]
    abort_blocks = [p.y for p in points if p.series == "abort-blocks"]
    assert max(naive_blocks) == math.ceil((4 + 14 - 2) / 2)  # grows until max_tokens - 1
    assert abort_blocks[0] > 0 and abort_blocks[2:] == [0] * len(abort_blocks[2:])


def test_immediate_detection_wastes_nothing():
    ctx, _ = run_tiny(detect="immediate", requests=1)
    assert ctx.summary["abort_wasted_tokens"] == 0
    assert ctx.summary["blocks_after_abort"] == 0


def test_run_stops_when_cancelled():
    calls = iter(range(1000))
    ctx = RunContext(LAB.clean(TINY), is_cancelled=lambda: next(calls) >= 3)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))
