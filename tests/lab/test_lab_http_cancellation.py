"""The HTTP cancellation lab: real server processes, clients that hang up early."""

from __future__ import annotations

import pytest

from lab.labs.base import LabParamError, RunContext
from lab.labs.http_cancellation import LAB, levels

pytestmark = pytest.mark.timeout(240)


def test_levels_and_rules():
    assert levels(1) == [1] and levels(6) == [1, 2, 4, 6] and levels(8) == [1, 2, 4, 8]
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_tokens": 10, "leave_after": 10})
    assert "smaller than max_tokens" in err.value.errors["leave_after"]


def test_abort_saves_what_the_naive_server_burns():
    ctx = RunContext(LAB.clean({"clients": 2, "max_tokens": 60, "leave_after": 3}))
    points = {(p.series, p.x): p for p in LAB.run(ctx)}
    assert set(points) == {
        (s, n) for s in ("naive", "abort", "naive-busy", "abort-busy") for n in (1, 2)
    }
    for n in (1, 2):
        abort, naive = points[("abort", n)], points[("naive", n)]
        assert abort.y <= n  # at most the step running when each client left
        assert abort.extra["aborted"] == n
        assert naive.y >= n * (60 - 3) * 0.9  # decoded (nearly) to max_tokens for nobody
        assert naive.extra["aborted"] == 0
        assert abort.extra["kv_blocks_allocated_after"] == 0
        assert points[("naive-busy", n)].y > points[("abort-busy", n)].y
