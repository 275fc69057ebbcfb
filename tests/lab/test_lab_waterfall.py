"""The waterfall lab: hops from the server's own timings, stacked per load level."""

from __future__ import annotations

import pytest

from lab.engine.server.timing import HOPS
from lab.labs.base import RunContext
from lab.labs.waterfall import LAB

pytestmark = pytest.mark.timeout(240)


def test_hops_stack_to_just_under_the_client_latency():
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
    assert {p.series for p in points} == {*HOPS, "client-e2el", "server-total"}
    for rate in (2.0, 4.0):
        at = {p.series: p for p in points if p.x == rate}
        assert all(at[h].y >= 0 for h in HOPS) and at["decode"].y > 0
        total = sum(at[h].y for h in HOPS)
        assert at["server-total"].y == pytest.approx(total)
        assert total <= at["client-e2el"].y  # the client also waits for HTTP around it
        assert at["client-e2el"].extra["predicted"] == pytest.approx(total)
