"""The disaggregation lab: the KV a request hands over is exactly the formula's bytes, the
trace is seeded, the stall table refuses disturbed timings, a small real run with two
engine processes lands inside its claims, and the processes never outlive a run."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lab.conditions import Meter
from lab.engine.disagg_pair import spawn_pair
from lab.engine.kv_pool import kv_bytes_per_token
from lab.labs.base import LabCancelled, LabParamError, RunContext
from lab.labs.calibration import CalibrationError
from lab.labs.common import bundled_shape
from lab.labs.disagg_trace import (
    StallTable,
    kv_bytes,
    latencies,
    off_cpu_pct,
    percentile,
    stall_table,
    stalls,
    trace,
)
from lab.labs.disaggregation import LAB, calibration_lengths, flops_per_token
from lab.labs.verdicts import contention, judge, pairs

pytestmark = pytest.mark.usefixtures("one_thread")
SMALL = {"long_prompts": 6, "decodes": 12, "decode_output": 48}


def worker_children() -> list[int]:
    """Pids of this process's live disagg_worker children."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"disagg_worker" in cmd:
            found.append(int(stat.parent.name))
    return found


def test_defaults_clean_and_pass_the_cross_checks():
    params = LAB.clean({})
    assert params == LAB.defaults()
    assert LAB.check(params) == {}


@pytest.mark.parametrize(("raw", "field", "says"), [
    ({"long_min": 400, "long_max": 300}, "long_min", "longer than the longest"),
    ({"long_max": 500, "long_output": 32}, "long_max", "512-token context"),
    ({"decode_prompt": 128, "decode_output": 400}, "decode_output", "512-token context"),
    ({"decodes": 100, "decode_rate": 2}, "decodes", "≤ 10 s"),
    ({"long_prompts": 0}, "long_prompts", "at least 2"),
    ({"long_rate": "fast"}, "long_rate", "must be a number"),
    ({"block_size": 0}, "block_size", "at least 1"),
])  # fmt: skip
def test_bad_parameters_are_refused_with_a_reason(raw, field, says):
    with pytest.raises(LabParamError) as err:
        LAB.clean(raw)
    assert says in err.value.errors[field]


def test_the_trace_is_seeded_and_holds_what_the_parameters_say():
    p = LAB.clean(SMALL)
    a, b = trace(p), trace(p)
    assert a == b and a != trace({**p, "seed": 1})
    longs = [r for r in a if r.kind == "long"]
    decodes = [r for r in a if r.kind == "decode"]
    assert len(longs) == p["long_prompts"] and len(decodes) == p["decodes"]
    assert all(p["long_min"] <= len(r.prompt) <= p["long_max"] for r in longs)
    assert all(len(r.prompt) == p["decode_prompt"] for r in decodes)
    assert [r.arrival_s for r in a] == sorted(r.arrival_s for r in a)
    assert [r.id for r in a] == list(range(len(a)))
    assert min(r.arrival_s for r in longs) > 0  # after the first decode arrived


def test_kv_bytes_are_the_formula_and_linear_in_tokens():
    s = bundled_shape("target")
    per_token = 2 * s["num_hidden_layers"] * s["num_key_value_heads"] * s["head_dim"] * 4
    assert per_token == 2560  # 5 layers, 2 KV heads (not 8 attention heads), 32, fp32
    assert per_token == kv_bytes_per_token(
        s["num_hidden_layers"], s["num_key_value_heads"], s["head_dim"], torch.float32
    )  # the engine's own accounting
    assert [kv_bytes(n) for n in (1, 2, 300)] == [2560, 5120, 300 * 2560]
    assert kv_bytes(0) == 0


def test_predict_draws_one_exact_point_per_request_before_the_run():
    p = LAB.clean(SMALL)
    points = LAB.predict(p)
    reqs = trace(p)
    assert [pt.series for pt in points] == ["kv-bytes-predicted"] * len(reqs)
    assert [pt.y for pt in points] == [len(r.prompt) * 2560 / 1024 for r in reqs]


@pytest.mark.parametrize(("raw", "lengths"), [
    ({}, [24, 128, 256, 304, 352, 400, 448]),
    ({"long_min": 64, "long_max": 64, "decode_prompt": 64}, [32, 64]),
    ({"long_min": 256, "long_max": 270}, [24, 128, 270]),
])  # fmt: skip
def test_the_stall_is_timed_at_lengths_apart_that_span_the_trace(raw, lengths):
    assert calibration_lengths(LAB.clean(raw)) == lengths


def test_stall_table_interpolates_and_sums_the_prefills_of_a_step():
    table = StallTable([24, 256, 448], [2.0, 30.0, 100.0])
    assert table.one_ms(256) == 30.0 and table.one_ms(352) == 65.0
    assert table.stall_ms([256, 24]) == 32.0
    xs = range(24, 449, 8)
    assert all(table.one_ms(a) <= table.one_ms(b) for a, b in itertools.pairwise(xs))  # monotone


def rounds(medians: list[float], n: int = 4) -> list[list[list[float]]]:
    """[plain ms, mixed ms, plain CPU ms, mixed CPU ms] per length; the wall times are
    inflated (another process had the core): the table reads CPU time."""
    return [[[9.0, 9.0 + 3 * m, 3.0, 3.0 + m] for m in medians] for _ in range(n)]


def test_stall_table_takes_medians_after_the_warmup():
    r = rounds([2.0, 30.0, 100.0])
    r[0] = [[3.0, 500.0, 3.0, 500.0]] * 3  # a cold first round, discarded
    table = stall_table([24, 256, 448], r, flops_per_token())
    assert table.median_ms == pytest.approx([2.0, 30.0, 100.0])


@pytest.mark.parametrize(("medians", "says"), [
    ([2.0, 30.0, 25.0], "did not take longer"),
    ([-1.0, 30.0, 100.0], "did not slow the decode step"),
])  # fmt: skip
def test_stall_table_refuses_disturbed_timings(medians, says):
    with pytest.raises(CalibrationError) as err:
        stall_table([24, 256, 448], rounds(medians), flops_per_token())
    assert says in str(err.value)


def test_a_stall_is_the_step_above_a_plain_step_of_the_same_batch():
    def step(cpu_ms, decodes, prefilled, wall_ms=None):
        return {"ms": wall_ms or cpu_ms, "cpu_ms": cpu_ms, "decodes": decodes,
                "prefill_tokens": 300 * len(prefilled), "prefilled": prefilled}  # fmt: skip

    steps = [
        step(4.0, 2, []), step(5.0, 3, []), step(4.0, 2, [], wall_ms=9.0),
        step(44.0, 2, [7], wall_ms=60.0),  # off the CPU for 16 ms: not the prefill's work
        step(50.0, 5, [8]),  # no plain step of 5 decodes: the nearest, 3
        step(60.0, 0, [9]),  # nothing stalled
    ]  # fmt: skip
    found = stalls(steps, {7: 300, 8: 310, 9: 320})
    assert [(s["stall_ms"], s["prompts"]) for s in found] == [(40.0, [300]), (45.0, [310])]
    assert [s["wall_stall_ms"] for s in found] == [(60.0 - 6.5), 45.0]
    assert off_cpu_pct(steps[:3]) == pytest.approx(100 * (1 - 13 / 18))


def test_latencies_follow_the_serving_benchmark_and_count_every_token():
    reqs = trace(LAB.clean(SMALL))[:1]
    r = reqs[0]
    t0 = 100.0
    ts = [t0 + r.arrival_s + 0.010 + 0.002 * i for i in range(r.max_tokens)]
    ttft, tpot, itl = latencies(reqs, t0, {r.id: ts})[r.id]
    assert ttft == pytest.approx(10.0) and tpot == pytest.approx(2.0)
    assert itl == pytest.approx([2.0] * (r.max_tokens - 1))
    with pytest.raises(RuntimeError, match="produced"):
        latencies(reqs, t0, {r.id: ts[:-1]})
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile(list(range(100)), 99) == 98


def _run_small():
    for attempt in (1, 2):  # a calibration refused under load says "run again": once
        meter = Meter.start()
        ctx = RunContext(LAB.clean(SMALL))
        started = time.perf_counter()
        try:
            points = list(LAB.run(ctx))
        except CalibrationError:
            contended = contention(meter.end_record())
            if attempt == 2 and contended:
                pytest.skip(f"calibration refused twice under contention ({contended})")
            if attempt == 2:
                raise
            continue
        return points, ctx.summary, contention(meter.end_record()), time.perf_counter() - started


@pytest.fixture(scope="module")
def small_run():
    return _run_small()


def test_a_small_run_moves_exactly_the_formula_bytes(small_run):
    points, summary, _, _ = small_run
    reqs = {r.arrival_s: r for r in trace(LAB.clean(SMALL))}
    sent = [p for p in points if p.series == "kv-bytes"]
    assert len(sent) == len(reqs)
    for p in sent:
        assert p.extra["kv_bytes"] == kv_bytes(len(reqs[p.x].prompt)) == p.extra["predicted"] * 1024
        assert p.extra["token_id_bytes"] == 4 * len(reqs[p.x].prompt)
    assert summary["header_bytes_per_frame"] > 16  # counted apart, not in the KV bytes
    assert worker_children() == []


def test_a_small_run_draws_every_series_and_the_ratios(small_run):
    points, summary, _, wall_s = small_run
    drawn = {p.series for p in points}
    assert drawn == {s.name for s in LAB.series} - {"kv-bytes-predicted"}  # from predict()
    for mode in ("colocated", "disagg"):
        for metric in ("ttft", "tpot", "itl"):
            assert summary[f"{mode}_{metric}_p50_ms"] <= summary[f"{mode}_{metric}_p99_ms"]
    assert summary["colocated_stall_total_ms"] > 0 and summary["disagg_transfer_total_ms"] > 0
    assert "Unix domain socket" in summary["transport"] and "GB/s" in summary["constants"]
    assert "2 CPU cores" in summary["note"]
    bounds = sorted((p.extra["frame_bytes"], p.extra["predicted"]) for p in points
                    if p.series == "transfer")  # fmt: skip
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(bounds))  # monotone in bytes
    # the smallest frames are bounded by the fastest probe frame of their size, not bytes/BW
    assert bounds[0][1] == pytest.approx(summary["frame_floor_ms"])
    assert "per-frame floor" in summary["constants"]
    assert wall_s < 60


def test_a_small_run_lands_inside_its_claims(small_run):
    points, _, contended, _ = small_run
    verdicts = {}
    for name, rows in pairs(LAB, points).items():
        series = LAB.series_by_name()[name]
        if series.claim == "estimate":  # within twice its band
            series = replace(series, band=2 * series.band)
        verdicts[name] = judge(series, rows, contended)
    assert set(verdicts) == {"kv-bytes-predicted", "transfer-bound", "stall-predicted"}
    assert verdicts["kv-bytes-predicted"].status == "held"  # exact: contention no excuse
    ok = ("held", "inconclusive") if contended else ("held",)
    assert verdicts["transfer-bound"].status in ok, verdicts["transfer-bound"].text
    assert verdicts["stall-predicted"].status in ok, verdicts["stall-predicted"].text
    assert "more than 1.2×" not in verdicts["transfer-bound"].text


def test_cancel_stops_the_run_and_its_processes():
    started = time.perf_counter()
    ctx = RunContext(LAB.clean(SMALL), is_cancelled=lambda: time.perf_counter() - started > 4)
    with pytest.raises(LabCancelled):
        list(LAB.run(ctx))
    assert time.perf_counter() - started < 15
    assert worker_children() == []


def test_a_failing_process_is_a_readable_error_and_both_are_stopped():
    with pytest.raises(RuntimeError) as err, spawn_pair() as (prefill, decode):
        assert sorted(worker_children()) == sorted([prefill.proc.pid, decode.proc.pid])
        with pytest.raises(RuntimeError, match="unknown command 'nope'"):
            prefill.call({"cmd": "nope"})
        decode.proc.kill()
        decode.call({"cmd": "recv_probe", "count": 1})
    assert "decode engine process exited" in str(err.value)
    assert worker_children() == []
