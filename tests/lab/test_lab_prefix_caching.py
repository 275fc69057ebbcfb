"""The prefix-caching lab: hits are exactly the full blocks of the shared prefix, a
changing timestamp defeats the cache, and the cache-off engine recomputes everything."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.formulas import prefix_hit_tokens
from lab.labs.prefix_caching import LAB, chat_plan, predicted_hits, timestamp_ids

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"turns": 3, "system_tokens": 20, "user_tokens": 5, "answer_tokens": 3,
        "block_size": 4, "repeats": 1}  # fmt: skip


def test_defaults_clean():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"turns": 40, "block_size": 0})
    assert "at most 16" in err.value.errors["turns"]
    assert "at least 1" in err.value.errors["block_size"]


def test_a_chat_longer_than_the_context_is_refused():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"turns": 16, "system_tokens": 256, "user_tokens": 128})
    assert "context" in err.value.errors["turns"]


def test_only_full_blocks_of_the_shared_prefix_hit():
    assert prefix_hit_tokens(100, 200, 16) == 96
    assert prefix_hit_tokens(100, 101, 16) == 96
    assert prefix_hit_tokens(100, 97, 16) == 96  # (97 - 1) // 16 = 6 blocks: last computed
    assert prefix_hit_tokens(100, 96, 16) == 80
    assert prefix_hit_tokens(15, 200, 16) == 0


def test_timestamps_change_every_turn():
    stamps = [timestamp_ids(t) for t in range(1, 6)]
    assert len({tuple(s) for s in stamps}) == 5


def test_predicted_hits_follow_the_conversation():
    params = LAB.clean({**TINY, "block_size": 16})
    plan = chat_plan(params)
    on = predicted_hits(plan, "cache-on", 16)
    assert on[0] == 0
    # Turn 2 shares turn 1's prompt (20 + 5) and 2 of its 3 answer tokens: 27 -> 16.
    assert on[1] == 16
    assert predicted_hits(plan, "cache-off", 16) == [0, 0, 0]
    assert predicted_hits(plan, "silent-miss", 16) == [0, 0, 0]


def run_lab(params: dict) -> tuple[list, dict]:
    ctx = RunContext(LAB.clean(params))
    return list(LAB.run(ctx)), ctx.summary


def test_run_hits_exactly_the_predicted_blocks():
    points, summary = run_lab(TINY)
    declared = {s.name for s in LAB.series}
    assert {p.series for p in points} <= declared
    assert {p.series for p in points} == declared - {"hit-tokens-predicted"}  # from predict()
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
    by = {(p.series, p.x): p for p in points}
    predicted = {p.x: p.y for p in LAB.predict(LAB.clean(TINY))}
    for turn in (1, 2, 3):
        on, off, silent = (by[(c, turn)] for c in ("cache-on", "cache-off", "silent-miss"))
        assert on.extra["prefix_hit_tokens"] == on.extra["predicted_hit_tokens"]
        assert by[("hit-tokens", turn)].y == predicted[turn] == on.extra["prefix_hit_tokens"]
        assert silent.extra["prefix_hit_tokens"] == silent.extra["predicted_hit_tokens"]
        assert off.extra["prefix_hit_tokens"] == 0
        # What the first step computed is exactly what the cache did not hold.
        for point in (on, off, silent):
            uncached = point.extra["prompt_tokens"] - point.extra["prefix_hit_tokens"]
            assert point.extra["computed_tokens"] == uncached
    # From turn 2 on the cache serves most of the prompt; the timestamped chat gets at most
    # the blocks inside the timestamp's unchanged leading characters.
    for turn in (2, 3):
        on_hits = by[("cache-on", turn)].extra["prefix_hit_tokens"]
        # uncached: the new message, the last answer token, at most a partial block
        assert on_hits >= by[("cache-on", turn)].extra["prompt_tokens"] - (5 + 1 + 3)
        assert by[("silent-miss", turn)].extra["prefix_hit_tokens"] < len(timestamp_ids(turn))
    assert summary["cache_off_hit_tokens_total"] == 0
    assert summary["ms_per_token"] >= 0 and summary["step_ms"] > 0


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 4

    ctx = RunContext(LAB.clean(TINY), is_cancelled=cancelled)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))
