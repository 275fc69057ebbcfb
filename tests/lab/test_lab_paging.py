"""The paging lab: measured KV waste equals the arithmetic on the known lengths."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.common import bundled_shape
from lab.labs.formulas import kv_bytes_per_token
from lab.labs.paging import LAB, block_sizes, workload

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"sequences": 3, "min_len": 3, "max_len": 40, "decode_max": 4, "max_model_len": 48,
        "largest_block": "16", "seed": 5}  # fmt: skip


def test_defaults_clean():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_model_len": 1024, "largest_block": "3"})
    assert "at most 512" in err.value.errors["max_model_len"]
    assert "16, 32" in err.value.errors["largest_block"]


def test_cross_param_rules():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"min_len": 100, "max_len": 50})
    assert "longest" in err.value.errors["min_len"]
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_len": 200, "max_model_len": 201})
    assert "199" in err.value.errors["max_len"]


def test_workload_and_block_sizes():
    work = workload(LAB.clean(TINY))
    assert len(work) == 3
    assert all(3 <= p + d <= 40 and p >= 1 and 0 <= d <= 4 for p, d in work)
    assert block_sizes(16) == [1, 2, 4, 8, 16]


def test_run_measures_exactly_the_predicted_waste():
    params = LAB.clean(TINY)
    ctx = RunContext(params)
    points = list(LAB.run(ctx))
    assert {p.series for p in points} == {"contiguous", "paged"}
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
        assert math.isclose(p.y, p.extra["predicted"], rel_tol=1e-9, abs_tol=1e-12)
    shape = bundled_shape("target")
    per_token = kv_bytes_per_token(shape["num_hidden_layers"], shape["num_key_value_heads"],
                                   shape["head_dim"], 4)  # fmt: skip
    lengths = [p + d for p, d in workload(params)]
    paged = {p.x: p for p in points if p.series == "paged"}
    assert sorted(paged) == [1, 2, 4, 8, 16]
    for b, point in paged.items():  # bytes written and reserved, from the pool itself
        assert point.extra["written_bytes"] == sum(lengths) * per_token
        reserved = sum(math.ceil(n / b) * b for n in lengths) * per_token
        assert point.extra["reserved_bytes"] == reserved == point.extra["manager_allocated_bytes"]
    assert paged[1].y == 0  # one-token blocks waste nothing
    wastes = [paged[b].y for b in sorted(paged)]
    assert wastes == sorted(wastes)  # bigger blocks never waste less
    contiguous = [p for p in points if p.series == "contiguous"]
    assert contiguous[0].extra["reserved_bytes"] == 3 * 48 * per_token
    assert all(c.y > max(wastes) for c in contiguous)
    predicted = LAB.predict(params)
    assert {p.series for p in predicted} == {"contiguous-predicted", "paged-predicted"}


def test_run_stops_when_cancelled():
    calls = iter(range(1000))
    ctx = RunContext(LAB.clean(TINY), is_cancelled=lambda: next(calls) >= 2)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))
