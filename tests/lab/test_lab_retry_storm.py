"""The retry-storm lab: a real server, real timeouts, four client retry policies."""

from __future__ import annotations

import pytest

from lab.labs.base import RunContext
from lab.labs.retry_storm import LAB, POLICIES

pytestmark = pytest.mark.timeout(240)


def test_a_short_run_measures_every_policy_and_the_budget_holds():
    ctx = RunContext(LAB.clean({"seconds_per_policy": 3}))
    points = list(LAB.run(ctx))
    by = {(p.series, p.x): p for p in points}
    assert set(by) == {(s.name, x) for s in LAB.series for x in range(len(POLICIES))}
    assert ctx.summary["timeout_s"] > 0 and ctx.summary["arrival_rate"] > 0
    for x, policy in enumerate(POLICIES):
        offered, useful = by[("offered", x)], by[("useful", x)]
        assert offered.extra["policy"] == policy and offered.y >= useful.y >= 0
    none = by[("offered", 0)].extra["attempts_per_request"]
    assert none == 1  # no retries: one attempt per request
    budget = by[("offered", 3)].extra["attempts_per_request"]
    assert budget <= 1 + 0.1 + 10 / by[("offered", 3)].extra["requests"]  # bucket cap 10
