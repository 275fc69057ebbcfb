"""The prefix-caching lab: hits are exactly the full blocks of the shared prefix, a
changing timestamp defeats the cache, and the cache-off engine recomputes everything."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from lab.conditions import Meter
from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.calibration import CalibrationError
from lab.labs.common import bundled_shape, random_model
from lab.labs.formulas import prefix_hit_tokens
from lab.labs.prefix_caching import (
    LAB,
    attended_pairs,
    calibration_design,
    chat_plan,
    checked_fit,
    fit_prefill,
    predicted_hits,
    timestamp_ids,
)
from lab.labs.verdicts import contention, judge, pairs

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"turns": 3, "system_tokens": 20, "user_tokens": 5, "answer_tokens": 3,
        "block_size": 4, "repeats": 3}  # fmt: skip


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
    assert summary["per_token_ms"] > 0 and summary["step_ms"] > 0
    assert "GFLOP/s" in summary["calibration"] and "discarded" in summary["warmup"]
    for p in points:
        if p.series in ("cache-on", "cache-off", "silent-miss"):
            assert p.extra["lo"] <= p.y <= p.extra["hi"] and p.extra["repeats"] >= 3


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 4

    ctx = RunContext(LAB.clean(TINY), is_cancelled=cancelled)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))


def test_fewer_than_three_repeats_are_refused():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"repeats": 1})
    assert "at least 3" in err.value.errors["repeats"]


def test_a_hit_still_attends_to_the_cached_keys():
    assert attended_pairs(0, 10) == 55  # 1 + 2 + ... + 10
    assert attended_pairs(8, 10) == 9 + 10  # two computed tokens, over 9 and 10 keys
    assert attended_pairs(10, 10) == 0


def test_the_design_separates_tokens_from_pairs():
    design = calibration_design([28, 92, 124, 141], 141, 16)
    cache_off = [p for h, p in design if h == 0]
    assert min(cache_off) == 28 and max(cache_off) == 141 and len(cache_off) == 4
    cached = [(h, p) for h, p in design if h]
    assert cached and all(h % 16 == 0 and p - h >= 28 for h, p in cached)
    assert max(p for _, p in design) <= 141  # never past the chat's longest prompt
    for turns, system in ((8, 128), (16, 128)):  # the defaults, and a chat near the context
        params = LAB.clean({"turns": turns, "system_tokens": system, "user_tokens": 8})
        plan = chat_plan(params)
        longest = max(plan.prompt_len(c, turns) for c in ("cache-on", "silent-miss"))
        assert max(p for _, p in calibration_design([20, longest], longest, 16)) <= longest


def test_the_fit_recovers_a_known_cost_model():
    design = calibration_design([20, 140], 140, 16)
    truth = (2.5, 0.08, 4e-4)
    ms = [truth[0] + truth[1] * (p - h) + truth[2] * attended_pairs(h, p) for h, p in design]
    assert fit_prefill(design, ms) == pytest.approx(truth, rel=1e-6)
    # pairs that seem to cost less than nothing (noise): the term is left out, not negative
    ms = [2.5 + 0.08 * (p - h) - 1e-5 * attended_pairs(h, p) for h, p in design]
    a, b, c = fit_prefill(design, ms)
    assert c == 0 and a > 0 and b > 0


def test_predicted_ttft_follows_the_uncached_tokens():
    """The predictor's shape: without hits TTFT grows every turn; with them it stays near
    the cost of the new message; the silent miss costs at least the cache-off chat."""
    model = random_model(bundled_shape("target"))
    design = calibration_design([20, 140], 140, 16)
    ms = [2.5 + 0.08 * (p - h) + 4e-4 * attended_pairs(h, p) for h, p in design]
    fit = checked_fit(model, design, ms)
    plan = chat_plan(LAB.clean({}))
    hits = {c: predicted_hits(plan, c, 16) for c in ("cache-on", "cache-off", "silent-miss")}

    def ttft(c: str, t: int) -> float:
        n, h = plan.prompt_len(c, t), hits[c][t - 1]
        return fit.ttft_ms(n - h, attended_pairs(h, n))

    off = [ttft("cache-off", t) for t in range(1, 9)]
    assert all(b > a for a, b in itertools.pairwise(off))
    for t in range(2, 9):
        assert ttft("cache-on", t) < 0.6 * off[t - 1]
        assert ttft("silent-miss", t) >= off[t - 1]


@pytest.mark.parametrize(
    ("timings", "says"),
    [
        ("longer_faster", "did not take longer"),  # a slope <= 0: refused, never clamped
        ("negative_step", "must be positive"),
    ],
)
def test_bad_calibration_timings_are_refused(timings, says):
    model = random_model(bundled_shape("target"))
    design = calibration_design([20, 140], 140, 16)
    if timings == "longer_faster":
        ms = [20.0 - 0.1 * (p - h) for h, p in design]
    else:
        ms = [-3.0 + 0.1 * (p - h) for h, p in design]
    with pytest.raises(CalibrationError) as err:
        checked_fit(model, design, ms)
    assert says in str(err.value)


def test_a_small_run_lands_inside_twice_the_declared_band():
    meter = Meter.start()
    params = {"turns": 4, "system_tokens": 64, "user_tokens": 12, "answer_tokens": 4}
    points, _ = run_lab(params)
    contended = contention(meter.end_record())  # on a shared machine: stated, not failed
    for name, rows in pairs(LAB, points).items():
        series = LAB.series_by_name()[name]
        verdict = judge(replace(series, band=2 * series.band), rows, contended)
        assert verdict.status in (("held", "inconclusive") if contended else ("held",)), (
            verdict.text
        )
