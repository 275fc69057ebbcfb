"""The batching lab: static vs continuous slot use, predicted schedules exact."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.batching import (
    LAB,
    continuous_schedule,
    percentile,
    static_schedule,
    step_cost_problem,
    workload,
)

pytestmark = pytest.mark.usefixtures("one_thread")

# width 1, fp32: the bundled shape, small and fast (the default, width 4 and the measured
# dtype, is the regime-true size: test_the_default_model_leaves_the_last_level_cache)
TINY = {"requests": 7, "slots": 3, "prompt_min": 2, "prompt_max": 5, "output_min": 1,
        "output_max": 9, "seed": 3, "width": 1, "dtype": "fp32"}  # fmt: skip


def test_defaults_clean():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"slots": 65, "requests": 1})
    assert "at most 64" in err.value.errors["slots"]
    assert "at least 2" in err.value.errors["requests"]


def test_cross_param_rules():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"prompt_min": 10, "prompt_max": 5, "output_min": 9, "output_max": 3})
    assert set(err.value.errors) == {"prompt_min", "output_min"}


def test_schedules_by_hand():
    # static: batch [3, 1] runs 3 steps, batch [1, 1] one; slots of finished members idle
    assert static_schedule([3, 1, 1, 1], 2) == [2, 1, 1, 2]
    # continuous: the short ones take turns in the second slot while the long one runs
    assert continuous_schedule([3, 1, 1, 1], 2) == [2, 2, 2]


def test_percentile_is_linear_interpolation():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert math.isclose(percentile([1.0, 2.0, 3.0, 4.0], 90), 3.7)


def run_tiny(**over):
    ctx = RunContext(LAB.clean({**TINY, **over}))
    return ctx, list(LAB.run(ctx))


def test_run_measures_what_the_workload_predicts():
    ctx, points = run_tiny()
    names = {s.name for s in LAB.series}
    assert {p.series for p in points} <= names
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
        assert p.y == p.extra["predicted"]  # token counts per step are exact
    outputs = [out for _, out in workload(LAB.clean(TINY))]
    last = {p.series: p for p in points}
    assert last["static"].y == last["continuous"].y == sum(outputs)
    # static: each batch of 3 runs for its longest output
    batch_max = sum(max(outputs[i : i + 3]) for i in range(0, len(outputs), 3))
    s = ctx.summary
    assert s["static_steps"] == last["static"].x == batch_max
    assert math.isclose(s["static_slot_use"], sum(outputs) / (3 * batch_max))
    assert s["continuous_steps"] == s["continuous_predicted_steps"] < batch_max
    assert s["continuous_slot_use"] > s["static_slot_use"]
    assert s["static_ttft_ms_p50"] <= s["static_ttft_ms_p90"]
    predicted = LAB.predict(LAB.clean(TINY))
    assert {p.series for p in predicted} == {"static-predicted", "continuous-predicted"}
    assert max(p.x for p in predicted if p.series == "static-predicted") == batch_max
    assert "discarded" in s["warmup"]


def test_a_disturbed_step_cost_is_refused_not_clamped():
    assert step_cost_problem(0.002, 0.0005, 0.001) == ""
    assert step_cost_problem(0.002, 0.0, 0.0) == ""  # a weights-bound step: b may be 0
    for bad in ((0.002, -0.0005, 0.001), (-0.001, 0.0005, 0.001), (0.002, 0.0005, -0.001)):
        assert "not physical" in step_cost_problem(*bad)


def test_run_stops_when_cancelled():
    calls = iter(range(1000))
    ctx = RunContext(LAB.clean(TINY), is_cancelled=lambda: next(calls) >= 4)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))


def test_the_default_model_leaves_the_last_level_cache():
    import torch

    from lab.engine.dtypes import last_level_cache_bytes
    from lab.labs.common import LLC_MULTIPLE, bundled_shape, lab_shape, matmul_params, random_model

    defaults = LAB.clean({})
    assert (defaults["width"], defaults["dtype"]) == (4, "auto")
    llc = last_level_cache_bytes()
    for dtype_bytes in (4, 2):
        with torch.device("meta"):
            model = random_model(lab_shape(defaults["width"], dtype_bytes, llc), "meta")
        assert matmul_params(model) * dtype_bytes >= LLC_MULTIPLE * llc
    assert lab_shape(1, 4, llc) == bundled_shape("target")


def test_a_run_says_what_model_and_dtype_ran():
    ctx, _ = run_tiny()
    s = ctx.summary
    assert s["dtype"].startswith("fp32") and "random weights" in s["model"]
    assert s["weight_mb"] > 0 and s["weights_over_llc"] == pytest.approx(
        s["weight_mb"] * 1e6 / (s["last_level_cache_mb"] * 1e6)
    )
