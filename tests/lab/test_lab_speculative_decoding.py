"""The speculative-decoding lab: lossless (the target's own greedy tokens), the trained
draft agrees with the target on real code, and the predicted curve uses alpha from k = 1."""

from __future__ import annotations

import math

import pytest

from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.formulas import spec_speedup, spec_tokens_per_step
from lab.labs.speculative_decoding import LAB

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"max_k": 2, "prompts": 2, "prompt_tokens": 16, "new_tokens": 8, "max_batch": "4"}


def test_defaults_clean():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


def test_bounds_name_the_limit():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"max_k": 13, "max_batch": "8", "prompts": 0})
    assert "at most 12" in err.value.errors["max_k"]
    assert "1, 4, 16" in err.value.errors["max_batch"]
    assert "at least 1" in err.value.errors["prompts"]


def test_prompt_and_answer_must_fit_the_context():
    with pytest.raises(LabParamError) as err:
        LAB.clean({"prompt_tokens": 400, "new_tokens": 200})
    assert "at most 112" in err.value.errors["new_tokens"]


def test_speedup_formula():
    assert spec_speedup(0.0, 3, 0.0) == pytest.approx(1.0)
    assert spec_speedup(0.5, 2, 0.25) == pytest.approx(spec_tokens_per_step(0.5, 2) / 1.5)
    assert spec_speedup(1.0, 3, 0.5) == pytest.approx(4 / 2.5)


def test_run_is_lossless_and_the_draft_agrees_on_code():
    params = LAB.clean(TINY)
    ctx = RunContext(params)
    points = list(LAB.run(ctx))
    declared = {s.name for s in LAB.series}
    assert {p.series for p in points} == declared - {"speedup-b16"}  # max_batch 4
    for p in points:
        assert math.isfinite(p.x) and math.isfinite(p.y)
    by = {(p.series, p.x): p for p in points}
    assert ctx.summary["mismatched_sequences"] == 0
    alpha1 = by[("tokens-per-step", 1)].extra["alpha"]
    # Far above chance (1 / vocabulary): the trained draft predicts the target on real code.
    assert 0.1 < alpha1 <= 1
    for k in (1, 2):
        measured = by[("tokens-per-step", k)]
        assert measured.extra["identical_to_target"] is True
        assert 1 <= measured.y <= k + 1
        assert measured.extra["predicted"] == pytest.approx(spec_tokens_per_step(alpha1, k))
        assert by[("tokens-per-step-predicted", k)].y == measured.extra["predicted"]
        assert by[("speedup", k)].y > 0
    # At batch 1 each target pass gains its accepted drafts plus one token.
    m1 = by[("tokens-per-step", 1)]
    assert m1.y == pytest.approx(1 + m1.extra["accepted"] / (params["prompts"] * 8 / m1.y))
    assert {p.x for p in points if p.series == "speedup-b4"} == {1, 2}
    assert ctx.summary["cost_ratio"] > 0
    assert "3 timed pairs" in ctx.summary["cost_ratio_spread"]
    assert "discarded" in ctx.summary["warmup"]
    for p in points:  # every timed point: the median of >= 3 pairs, its spread kept
        if p.series.startswith("speedup") and not p.series.endswith("predicted"):
            assert p.extra["lo"] <= p.y <= p.extra["hi"] and p.extra["repeats"] >= 3


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 2

    with pytest.raises(LabCancelled):
        list(LAB.run(RunContext(LAB.clean(TINY), is_cancelled=cancelled)))
