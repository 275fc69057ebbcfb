"""The long-context-admission lab: parameters refused with reasons, the KV-displacement
arithmetic exact against the simulator's own admission, the step-cost fit and its
refusals, the queueing estimate's shape and domain, and a small real run on this CPU."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab.conditions import Meter
from lab.labs import fleet_sim as fs
from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.calibration import CalibrationError
from lab.labs.common import bundled_shape, random_model
from lab.labs.long_context_admission import (
    DECODE_POINTS,
    LAB,
    PREFILL_LENGTHS,
    OutOfDomain,
    background_wait_s,
    checked_cost,
    displaced_shorts,
    fit_step_cost,
    fleet_config,
    make_trace,
    predicted_waits,
)
from lab.labs.verdicts import contention, judge, pairs

pytestmark = pytest.mark.usefixtures("one_thread")

COST = fs.StepCost(3.7, 0.118, 0.156, 1e-5)
SMALL = {"replicas": 2, "short_rate": 4.0, "long_count": 2, "horizon_s": 30.0}


def test_defaults_clean():
    assert LAB.clean({}) == LAB.defaults()


@pytest.mark.parametrize(
    ("raw", "field", "says"),
    [
        ({"long_min": 150_000, "long_max": 120_000}, "long_max", "at least the shortest"),
        ({"kv_tokens": 100_000}, "kv_tokens", "must hold one long request"),
        ({"long_replicas": 4}, "long_replicas", "at least one replica for short"),
        ({"chunk_tokens": 100, "max_seqs": 128}, "chunk_tokens", "exceed the max batch"),
        ({"short_rate": 200, "horizon_s": 600, "short_output": 2048}, "horizon_s",
         "too long a run"),
        ({"replicas": 40}, "replicas", "at most 16"),
        ({"long_min": 50_000}, "long_min", "at least 100000"),
    ],
)  # fmt: skip
def test_bad_parameters_are_refused_with_a_reason(raw, field, says):
    with pytest.raises(LabParamError) as err:
        LAB.clean(raw)
    assert says in err.value.errors[field]


def test_no_long_requests_need_no_long_sized_budget():
    assert LAB.clean({"long_count": 0, "kv_tokens": 65_536})["kv_tokens"] == 65_536


def test_displacement_is_exact_against_the_simulators_admission():
    for kv, bs, short in ((262_144, 16, 639), (300_000, 16, 640), (262_144, 1, 1000),
                          (2_097_152, 256, 5000)):  # fmt: skip
        alone = fs.capacity_probe(kv, bs, short, 0)
        for long_tokens in (100_063, 137_777, 150_000, 200_063):
            if fs.blocks(long_tokens, bs) > kv // bs:
                continue
            beside = fs.capacity_probe(kv, bs, short, long_tokens)
            assert alone - beside == displaced_shorts(kv, bs, short, long_tokens)


def test_displacement_grows_linearly_with_the_long_request():
    """The predictor's shape: about l / s short sequences per long one, so doubling the
    long request doubles what it displaces (within the one a floor can round away)."""
    kv, bs, short = 1_048_576, 16, 639  # a short holds 40 blocks
    one = displaced_shorts(kv, bs, short, 100_000)
    two = displaced_shorts(kv, bs, short, 200_000)
    assert one == pytest.approx(100_000 / 640, abs=1)
    assert abs(two - 2 * one) <= 1
    assert displaced_shorts(kv, bs, short, 0) == 0


def test_predicted_points_sit_at_the_long_arrivals():
    params = LAB.clean({})
    points = LAB.predict(params)
    longs = [r for r in make_trace(params) if r.long]
    assert [p.x for p in points] == [r.arrival_s for r in longs]
    short = fs.kv_tokens_held(params["short_prompt"], params["short_output"])
    for p, r in zip(points, longs, strict=True):
        assert p.series == "displaced-predicted"
        assert p.y == displaced_shorts(params["kv_tokens"], params["block_size"], short,
                                       fs.kv_tokens_held(r.prompt, r.output))  # fmt: skip
        assert 100_000 / 640 - 1 <= p.y <= 200_064 / 640 + 1


def test_the_fit_recovers_a_known_cost_model():
    truth = (3.0, 0.05, 0.2, 2e-4)
    prefill = [truth[0] + truth[1] * n for n in PREFILL_LENGTHS]
    decode = [truth[0] + truth[2] * b + truth[3] * b * n for b, n in DECODE_POINTS]
    assert fit_step_cost(prefill, decode) == pytest.approx(truth, rel=1e-6)
    # a context cost below zero (noise) is left out, not kept negative
    decode = [3.0 + 0.2 * b - 1e-5 * b * n for b, n in DECODE_POINTS]
    assert fit_step_cost(prefill, decode)[3] == 0


@pytest.mark.parametrize(
    ("prefill_ms", "decode_ms", "says"),
    [
        ([20.0 - 0.01 * n for n in PREFILL_LENGTHS], None, "did not take longer"),
        ([-3.0 + 0.05 * n for n in PREFILL_LENGTHS], [-3.0 + 0.2 * b for b, _ in DECODE_POINTS],
         "must be positive"),
        (None, [10.0 - 0.1 * b for b, _ in DECODE_POINTS], "larger batches did not take"),
    ],
)  # fmt: skip
def test_bad_calibration_timings_are_refused(prefill_ms, decode_ms, says):
    model = random_model(bundled_shape("target"))
    prefill_ms = prefill_ms or [3.0 + 0.05 * n for n in PREFILL_LENGTHS]
    decode_ms = decode_ms or [3.0 + 0.2 * b for b, _ in DECODE_POINTS]
    with pytest.raises(CalibrationError) as err:
        checked_cost(model, prefill_ms, decode_ms)
    assert says in str(err.value)


def test_the_queueing_estimate_has_the_right_shape():
    params = LAB.clean({})
    requests = make_trace(params)
    fifo = predicted_waits(fleet_config(params, "fifo"), COST, requests)
    cap = predicted_waits(fleet_config(params, "cap"), COST, requests)
    shorts = [r for r in requests if not r.long]
    assert set(fifo) == set(cap) == {r.rid for r in shorts}
    # cap never sees a long prefill: every short waits only the background residual step
    assert len(set(cap.values())) <= params["replicas"]
    # under fifo a short arriving just after a long one waits for most of its prefill
    first_long = min((r for r in requests if r.long), key=lambda r: r.arrival_s)
    stall = COST.step_ms(first_long.prompt, 0, 0) / 1000
    home = fs.route(fleet_config(params, "fifo"), requests)[0]
    replica = next(reqs for reqs in home if first_long in reqs)
    after = [r for r in replica if not r.long and 0 < r.arrival_s - first_long.arrival_s < 1]
    assert after and all(stall - 1 < fifo[r.rid] <= stall for r in after)
    # a busier replica waits longer in the background
    assert background_wait_s(COST, 6.0, 512, 128) > background_wait_s(COST, 2.0, 512, 128)


def test_the_queueing_estimate_is_refused_outside_its_domain():
    params = LAB.clean({"short_rate": 30.0})  # ~150 shorts queue behind a long prefill
    with pytest.raises(OutOfDomain, match="catch-up"):
        predicted_waits(fleet_config(params, "fifo"), COST, make_trace(params))
    with pytest.raises(OutOfDomain, match="more than it serves"):
        predicted_waits(replace(fleet_config(params, "cap"), replicas=2), COST,
                        make_trace({**params, "short_rate": 200.0}))  # fmt: skip
    assert background_wait_s(COST, 1000.0, 512, 128) is None


def run_lab(params: dict) -> tuple[list, dict]:
    ctx = RunContext(LAB.clean(params))
    return list(LAB.run(ctx)), ctx.summary


def test_a_small_run_matches_exactly_and_lands_inside_twice_the_band():
    meter = Meter.start()
    points, summary = run_lab(SMALL)
    declared = {s.name for s in LAB.series}
    assert {p.series for p in points} <= declared
    assert "MEASURED" in summary["calibration"] and "GFLOP/s" in summary["calibration"]
    assert "SIMULATED" in summary["warmup"]
    for policy in fs.POLICIES:
        total = (summary[f"{policy}_completed"] + summary[f"{policy}_rejected"]
                 + summary[f"{policy}_unfinished"])  # fmt: skip
        assert total == len(make_trace(LAB.clean(SMALL)))
    assert summary["cap_rejected"] == 2 and summary["fifo_rejected"] == 0
    assert summary["fifo_short_ttft_p99_ms"] > 10 * summary["pool_short_ttft_p99_ms"]
    contended = contention(meter.end_record())
    rows = pairs(LAB, points)
    assert rows["displaced-predicted"] and rows["wait-fifo-predicted"]
    for name, series_rows in rows.items():
        series = LAB.series_by_name()[name]
        verdict = judge(replace(series, band=2 * series.band), series_rows, contended)
        assert verdict.status == "held", verdict.text  # simulated: load cannot excuse it


def test_cancel_stops_the_run():
    calls = {"n": 0}

    def cancelled() -> bool:
        calls["n"] += 1
        return calls["n"] > 3

    with pytest.raises(LabCancelled):
        list(LAB.run(RunContext(LAB.clean(SMALL), is_cancelled=cancelled)))
