"""The latency-vs-load lab: a real server process, Poisson load at rising rates."""

from __future__ import annotations

import pytest

from lab.labs.base import LabParamError, RunContext
from lab.labs.latency_vs_load import LAB, rates

pytestmark = pytest.mark.timeout(240)


def test_rates_and_time_budget():
    assert rates({"max_rate": 10.0, "levels": 4}) == [2.5, 5.0, 7.5, 10.0]
    with pytest.raises(LabParamError) as err:
        LAB.clean({"levels": 10, "seconds_per_level": 20})
    assert "≤ 150 s" in err.value.errors["seconds_per_level"]


def test_a_short_sweep_measures_every_series():
    params = LAB.clean(
        {
            "max_rate": 4,
            "levels": 2,
            "seconds_per_level": 2,
            "input_len": 16,
            "output_len": 8,
            "max_num_seqs": 4,
        }
    )
    ctx = RunContext(params)
    points = list(LAB.run(ctx))
    assert {p.series for p in points} == {s.name for s in LAB.series}
    assert ctx.summary["capacity_req_s"] > 0
    assert "3 closed loops" in ctx.summary["capacity_spread"]
    assert "unrecorded requests" in ctx.summary["warmup"]
    for p in points:
        assert p.x in (2.0, 4.0) and p.y > 0
        if p.series == "throughput":
            assert p.extra["failed"] == 0 and p.extra["completed"] >= 1
            assert p.extra["predicted"] == min(p.x, ctx.summary["capacity_req_s"])
    p50 = {p.x: p.y for p in points if p.series == "ttft-p50"}
    p99 = {p.x: p.y for p in points if p.series == "ttft-p99"}
    assert all(p50[x] <= p99[x] for x in p50)
