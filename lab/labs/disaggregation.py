"""Prefill/decode disaggregation: two engine processes, colocated vs split into a prefill
and a decode role with each request's KV handed over a Unix domain socket.

Two `python -m lab.engine.disagg_worker` processes (one torch thread each) load the same
bundled model. Colocated, each takes every other request of the trace and does both phases
with continuous batching: a long prompt's prefill joins a decode step and stalls every
decode in it. Disaggregated, the prefill process prefills every request, exports its prompt
KV and sends it (one KVH1 frame: header, int32 token ids, raw KV) over an AF_UNIX stream
socket to the decode process, which writes it into its own blocks and decodes.

Predictions: the KV part of each frame is exactly 2 × layers × kv_heads × head_dim × 4 bytes
× prompt tokens (the header and token ids are counted apart); a transfer takes at least
max(the fastest probe frame as small as the trace's smallest, its frame's bytes / the socket
bandwidth): probed before and after the traces, 100 frames of each size each time after 2
discarded, the sender spinning between frames (a sleeping core clocks down and wakes slowly,
and in a trace both processes are busy). With 10 probe frames the best probe was no faster
than the trace's transfers, and a trace transfer beat a bound drawn from it by 1.3-1.7x;
the per-frame floor keeps the small frames' bound within a few x of their time (bytes /
bandwidth alone was 10-18x under them: wake-ups and syscalls, not bytes, set a 60 KB
frame's time). A colocated stall (step ms above a decode-only step of the
same batch) ≈ the stall timed first, with both processes busy, when a prefill of that
length joins 4 running decodes (median of 10 rounds after a discarded one per process,
each round's length moved by a seeded ±8 tokens as a trace's lengths vary, linear between
up to 7 timed lengths ≥ 32 tokens apart, each segment's cost per token checked as a FLOP
rate).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

from lab.engine.disagg_pair import WorkerProcess, replies, spawn_pair
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.calibration import check_value
from lab.labs.common import bundled_shape
from lab.labs.disagg_trace import (
    Request,
    StallTable,
    kv_bytes,
    latencies,
    off_cpu_pct,
    percentile,
    stall_table,
    stalls,
    trace,
)

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"kv-bytes-predicted": 0, "transfer-bound": 0.2, "stall-predicted": 0.25}
MAX_SEQS = 32  # per engine process
PROBES, PROBE_WARMUP = 100, 2  # per size and probe: the bound is a best-of, so many
ROUNDS, CAL_DECODES = 6, 4  # stall calibration: rounds (the first discarded), decodes
JITTER = 8  # stall calibration: each round's length within ± this many tokens of nominal
START_S = 0.3  # a trace starts this long after it is sent (both processes get it first)
TRANSPORT = ("Unix domain socket (AF_UNIX stream); a KVH1 frame per request: 16-byte "
             "prefix + JSON meta (the header, counted apart) + int32 prompt ids + raw fp32 "
             "KV of the prompt tokens only (not whole blocks)")  # fmt: skip


class Disaggregation(Lab):
    slug = "disaggregation"
    title = "Prefill/decode disaggregation: stalls colocated vs KV transfers split"
    summary = (
        "Two engine processes run the same seeded trace twice: long prompts arriving at a "
        "rate among steady decodes. Colocated, each process prefills and decodes its half "
        "of the requests, so a long prefill joins a decode step and stalls every decode in "
        "it (ITL and TPOT p99 climb). Disaggregated, one process only prefills and hands "
        "each request's prompt KV over a Unix domain socket to the other, which only "
        "decodes: no stalls, a transfer per request instead — but one prefill process now "
        "queues what two shared, so TTFT can get worse. Predicted: the KV bytes per request "
        "exactly (2 × layers × KV heads × head dim × 4 B × prompt tokens; the header "
        "counted apart), each transfer at least max(the fastest small probe frame, its bytes / "
        "the socket bandwidth), both probed before and after the traces, and each "
        "colocated stall (the step's CPU time above a plain decode step's) "
        "from stalls timed first at up to 7 prompt lengths. On this 2-core CPU and a "
        "5M-parameter model every absolute number is small; the ratios (ITL and TPOT p99 "
        "colocated / disaggregated, stall / transfer time) are what carries over to GPUs, "
        "where KV moves over NVLink or RDMA. The chart opens on TPOT, stalls and transfers; TTFT "
        "and the KV bytes are in its legend (click to show) and in the tables below."
    )
    topics = ("prefill-decode", "full-stack-latency")
    params = (
        Param("long_prompts", "Long prompts", "int", 16, min=2, max=40),
        Param("long_min", "Long prompt, shortest", "int", 256, min=64, max=500, unit="tokens"),
        Param("long_max", "Long prompt, longest", "int", 448, min=64, max=500, unit="tokens"),
        Param("long_rate", "Long prompt rate", "float", 8.0, min=0.5, max=20, unit="req/s"),
        Param("long_output", "Long prompt output", "int", 8, min=2, max=32, unit="tokens"),
        Param("decodes", "Steady decodes", "int", 30, min=2, max=100),
        Param("decode_prompt", "Decode prompt", "int", 24, min=1, max=128, unit="tokens"),
        Param("decode_output", "Decode output", "int", 96, min=2, max=500, unit="tokens"),
        Param("decode_rate", "Decode rate", "float", 12.0, min=1, max=50, unit="req/s"),
        Param("block_size", "Block size", "int", 16, min=1, max=64, unit="tokens"),
        Param("seed", "Trace seed", "int", 0, min=0, max=2**31 - 1),
    )  # fmt: skip
    series = (
        Series("ttft-colocated", "TTFT, colocated", mode="markers", hidden=True),
        Series("ttft-disagg", "TTFT, disaggregated", mode="markers", hidden=True),
        Series("tpot-colocated", "TPOT, colocated", mode="markers"),
        Series("tpot-disagg", "TPOT, disaggregated", mode="markers"),
        Series("stall", "stall per prefill (CPU), colocated", mode="markers"),
        Series("stall-predicted", "stall, predicted", "predicted", predicts="stall",
               mode="markers", claim="estimate", band=BANDS["stall-predicted"]),
        Series("transfer", "KV transfer time, disaggregated", mode="markers"),
        Series("transfer-bound", "transfer ≥ max(floor, bytes / socket bandwidth)", "predicted",
               predicts="transfer", mode="markers", claim="bound",
               band=BANDS["transfer-bound"]),
        Series("kv-bytes", "KV sent per request", axis="y2", mode="markers", hidden=True),
        Series("kv-bytes-predicted", "KV bytes, formula", "predicted", predicts="kv-bytes",
               axis="y2", mode="markers", claim="exact", band=BANDS["kv-bytes-predicted"],
               hidden=True),
    )  # fmt: skip
    chart = Chart("request arrival (s)", "ms", y2_title="KV sent (KiB)", y_type="log")
    time_limit_s = 150

    def check(self, p: dict) -> dict[str, str]:
        limit, errors = bundled_shape("target")["max_position_embeddings"], {}
        if p["long_min"] > p["long_max"]:
            errors["long_min"] = (f"the shortest long prompt ({p['long_min']}) is longer than "
                                  f"the longest ({p['long_max']})")  # fmt: skip
        if p["long_max"] + p["long_output"] > limit:
            errors["long_max"] = (
                f"a {p['long_max']}-token prompt + {p['long_output']} output tokens exceed "
                f"the model's {limit}-token context"
            )
        if p["decode_prompt"] + p["decode_output"] > limit:
            errors["decode_output"] = (
                f"{p['decode_prompt']} + {p['decode_output']} tokens exceed the model's "
                f"{limit}-token context"
            )
        for n, rate in (("long_prompts", "long_rate"), ("decodes", "decode_rate")):
            if p[n] / p[rate] > 10:
                errors[n] = (f"{p[n]} requests at {p[rate]:g} req/s take "
                             f"{p[n] / p[rate]:.0f} s to arrive; keep it ≤ 10 s (fewer "
                             "requests or a higher rate)")  # fmt: skip
        return errors

    def miss_cause(self, series: str) -> str:
        return {
            "stall-predicted": "during the trace both processes compute at once and share "
            "the memory bandwidth and caches, unlike the calibration, or several prefills "
            "joined one step",
            "transfer-bound": "the socket was probed slower than the trace's transfers ran "
            "(a disturbed probe)",
        }.get(series, "")

    def loose_cause(self, series: str) -> str:
        return {
            "transfer-bound": "the bound is the socket's best case, probe frames sent back "
            "to back by a spinning sender with both processes otherwise idle; in the trace "
            "the prefill process sends between its own steps and the receiving thread shares "
            "the decode process (and its GIL) with the engine loop, so a transfer mostly waits "
            "on scheduling, not on bytes. A receiver in its own process, or a model of that "
            "wait, would tighten it",
        }.get(series, "")

    def predict(self, params: dict) -> list[Point]:
        return [Point("kv-bytes-predicted", r.arrival_s, kv_bytes(len(r.prompt)) / 1024)
                for r in trace(params)]  # fmt: skip

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        reqs = trace(p)
        with spawn_pair(block_size=p["block_size"], max_num_seqs=MAX_SEQS,
                        check=ctx.check_cancel) as (pre, dec):  # fmt: skip
            small = min(p["decode_prompt"], p["long_min"])
            probes = {n: self._probe(ctx, pre, dec, n) for n in (small, p["long_max"])}
            fit = self._calibrate(ctx, pre, dec, p)
            ctx.summary.update({
                "transport": TRANSPORT,
                "constants": self._constants(probes),
                "calibration": fit.describe(),
                "warmup": f"discarded: {PROBE_WARMUP} probe frames per probe and the first "
                          f"of {ROUNDS} calibration rounds per process; each trace runs "
                          "once per mode",
            })  # fmt: skip
            colocated = self._colocated(ctx, pre, dec, reqs)
            yield from self._colocated_points(reqs, colocated, fit, ctx)
            disagg = self._disagg(ctx, pre, dec, reqs)
            for n in probes:  # again: best of both
                probes[n] += self._probe(ctx, pre, dec, n)
            ctx.summary["constants"] = self._constants(probes)
            rates = [b / t for t, b in probes[p["long_max"]]]
            bandwidth = check_value("bandwidth_bytes_s", max(rates), "cpu",
                                    "local socket bandwidth")  # fmt: skip
            floor_s = check_value("dispatch_s", min(t for t, _ in probes[small]), "cpu",
                                  "fastest small KV frame")  # fmt: skip
            ctx.summary["socket_median_gb_s"] = statistics.median(rates) / 1e9
            ctx.summary["frame_floor_ms"] = floor_s * 1000
            yield from self._disagg_points(reqs, disagg, bandwidth, floor_s, ctx)
        self._ratios(ctx)

    # --- phases --------------------------------------------------------------------------
    @staticmethod
    def _probe(ctx, pre: WorkerProcess, dec: WorkerProcess,
               tokens: int) -> list[tuple[float, int]]:  # fmt: skip
        """(seconds, bytes) of each probe frame of a `tokens`-token KV, one at a time."""
        ctx.check_cancel()
        count = PROBE_WARMUP + PROBES
        pre.send({"cmd": "send_probe", "tokens": tokens, "count": count})
        dec.send({"cmd": "recv_probe", "count": count})
        _, got = replies([pre, dec], ctx.check_cancel)
        return [(t1 - t0, n) for t0, t1, n in got["frames"][PROBE_WARMUP:]]

    @staticmethod
    def _constants(probes: dict[int, list[tuple[float, int]]]) -> str:
        small, large = min(probes), max(probes)
        rates = [b / t for t, b in probes[large]]
        times = [t * 1000 for t, _ in probes[small]]
        return (f"local socket {max(rates) / 1e9:.2f} GB/s (best of {len(rates)} "
                f"{kv_bytes(large) / 2**20:.2f} MiB frames; median "
                f"{statistics.median(rates) / 1e9:.2f}); per-frame floor {min(times):.3f} ms "
                f"(fastest of {len(times)} {kv_bytes(small) / 1024:.0f} KiB frames; median "
                f"{statistics.median(times):.3f})")  # fmt: skip

    @staticmethod
    def _calibrate(ctx, pre: WorkerProcess, dec: WorkerProcess, p: dict) -> StallTable:
        """Both processes time stalls at once (as both compute in the trace: they share the
        memory bandwidth and caches); the first round of each is discarded, the rest pooled."""
        ctx.check_cancel()
        lengths = calibration_lengths(p)
        for i, w in enumerate((pre, dec)):
            w.send({"cmd": "calibrate", "lengths": lengths, "decodes": CAL_DECODES,
                    "rounds": ROUNDS, "seed": p["seed"] + 1 + i, "jitter": JITTER})  # fmt: skip
        a, b = replies([pre, dec], ctx.check_cancel)
        return stall_table(lengths, a["rounds"][1:] + b["rounds"][1:], flops_per_token(),
                           warmup=0)  # fmt: skip

    @staticmethod
    def _colocated(ctx, pre, dec, reqs: list[Request]) -> dict:
        ctx.check_cancel()
        t0 = time.perf_counter() + START_S
        for i, w in enumerate((pre, dec)):  # every other request to each process
            w.send({"cmd": "trace", "mode": "colocated", "t0": t0,
                    "requests": [r.as_dict() for r in reqs[i::2]]})  # fmt: skip
        a, b = replies([pre, dec], ctx.check_cancel)
        return {"t0": t0, "times": _ids(a["times"]) | _ids(b["times"]),
                "steps": [a["steps"], b["steps"]]}  # fmt: skip

    @staticmethod
    def _disagg(ctx, pre, dec, reqs: list[Request]) -> dict:
        ctx.check_cancel()
        t0 = time.perf_counter() + START_S
        pre.send({"cmd": "trace", "mode": "disagg", "t0": t0,
                  "requests": [r.as_dict() for r in reqs]})  # fmt: skip
        dec.send({"cmd": "trace", "mode": "disagg", "t0": t0, "expect": len(reqs)})
        a, b = replies([pre, dec], ctx.check_cancel)
        first, rest = _ids(a["times"]), _ids(b["times"])
        times = {i: first.get(i, [])[:1] + rest.get(i, []) for i in first}
        sent = {f["id"]: f for f in a["frames"]}
        for f in b["imports"]:  # what arrived is what left
            s = sent[f["id"]]
            if (s["header"], s["ids"], s["kv"]) != (f["header"], f["ids"], f["kv"]):
                raise RuntimeError(f"Request {f['id']}: sent {s} but received {f} bytes.")
        return {"t0": t0, "times": times, "imports": b["imports"],
                "steps": a["steps"] + b["steps"]}  # fmt: skip

    # --- points --------------------------------------------------------------------------
    def _colocated_points(self, reqs, run: dict, fit: StallTable, ctx) -> Iterator[Point]:
        lat = latencies(reqs, run["t0"], run["times"])
        yield from _latency_points("colocated", reqs, lat, ctx)
        by_id = {r.id: r for r in reqs}
        found = [s for steps in run["steps"]
                 for s in stalls(steps, {r.id: len(r.prompt) for r in reqs})]  # fmt: skip
        for s in found:
            longs = [by_id[i] for i in s["prefilled"] if by_id[i].kind == "long"]
            if not longs:  # a short decode prompt's prefill: in the total only
                continue
            predicted = fit.stall_ms(s["prompts"])
            extra = {"predicted": predicted, "prompt_tokens": s["prompts"],
                     "decodes_stalled": s["decodes"], "step_cpu_ms": s["cpu_ms"],
                     "plain_cpu_ms": s["plain_ms"],
                     "wall_stall_ms": s["wall_stall_ms"]}  # fmt: skip
            yield Point("stall", longs[0].arrival_s, s["stall_ms"], extra)
            yield Point("stall-predicted", longs[0].arrival_s, predicted)
        ctx.summary["colocated_stall_total_ms"] = sum(s["stall_ms"] for s in found)
        ctx.summary["colocated_wall_stall_total_ms"] = sum(s["wall_stall_ms"] for s in found)
        ctx.summary["colocated_prefill_joined_steps"] = len(found)
        ctx.summary["colocated_off_cpu_pct"] = off_cpu_pct([s for st in run["steps"] for s in st])

    def _disagg_points(self, reqs, run: dict, bandwidth: float, floor_s: float,
                       ctx) -> Iterator[Point]:  # fmt: skip
        lat = latencies(reqs, run["t0"], run["times"])
        yield from _latency_points("disagg", reqs, lat, ctx)
        by_id = {r.id: r for r in reqs}
        transfer_ms, kv_total = [], 0
        for f in sorted(run["imports"], key=lambda f: f["id"]):
            r, total = by_id[f["id"]], f["header"] + f["ids"] + f["kv"]
            ms, bound = (
                (f["t_received"] - f["t_send"]) * 1000,
                max(floor_s, total / bandwidth) * 1000,
            )
            transfer_ms.append(ms)
            kv_total += f["kv"]
            yield Point("transfer", r.arrival_s, ms, {
                "predicted": bound, "frame_bytes": total, "import_ms": f["import_ms"]})  # fmt: skip
            yield Point("transfer-bound", r.arrival_s, bound)
            predicted = kv_bytes(len(r.prompt)) / 1024
            yield Point("kv-bytes", r.arrival_s, f["kv"] / 1024, {
                "predicted": predicted, "kv_bytes": f["kv"], "header_bytes": f["header"],
                "token_id_bytes": f["ids"], "prompt_tokens": len(r.prompt)})  # fmt: skip
        ctx.summary.update({
            "disagg_transfer_p50_ms": statistics.median(transfer_ms),
            "disagg_transfer_total_ms": sum(transfer_ms),
            "disagg_import_total_ms": sum(f["import_ms"] for f in run["imports"]),
            "kv_kib_per_request_mean": kv_total / len(run["imports"]) / 1024,
            "header_bytes_per_frame": run["imports"][0]["header"],
            "disagg_off_cpu_pct": off_cpu_pct(run["steps"]),
        })  # fmt: skip

    @staticmethod
    def _ratios(ctx) -> None:
        s = ctx.summary
        for metric in ("itl", "tpot", "ttft"):
            s[f"{metric}_p99_colocated_over_disagg_ratio"] = (
                s[f"colocated_{metric}_p99_ms"] / s[f"disagg_{metric}_p99_ms"]
            )
        if s["disagg_transfer_total_ms"]:
            s["stall_over_transfer_ratio"] = (s["colocated_stall_total_ms"]
                                              / s["disagg_transfer_total_ms"])  # fmt: skip
        s["note"] = ("2 CPU cores and a 5M-parameter model: the absolute ms are small and "
                     "not a GPU's; the ratios above are what carries over.")  # fmt: skip


def _latency_points(mode: str, reqs, lat: dict, ctx) -> Iterator[Point]:
    for r in reqs:
        ttft, tpot, _ = lat[r.id]
        extra = {"kind": r.kind, "prompt_tokens": len(r.prompt), "output_tokens": r.max_tokens}
        yield Point(f"ttft-{mode}", r.arrival_s, ttft, extra)
        if tpot is not None:
            yield Point(f"tpot-{mode}", r.arrival_s, tpot, extra)
    ttfts = [t for t, _, _ in lat.values()]
    tpots = [t for _, t, _ in lat.values() if t is not None]
    itls = [gap for _, _, gaps in lat.values() for gap in gaps]
    for name, values in (("ttft", ttfts), ("tpot", tpots), ("itl", itls)):
        ctx.summary[f"{mode}_{name}_p50_ms"] = percentile(values, 50)
        ctx.summary[f"{mode}_{name}_p99_ms"] = percentile(values, 99)


def calibration_lengths(p: dict, min_gap: int = 32) -> list[int]:
    """Prompt lengths the stall is timed at: a decode's prompt (it may join a step too),
    half the shortest long prompt, and 5 spanning the long ones; at least `min_gap` tokens
    apart (closer ones differ by less than the noise), the longest always included."""
    lo, hi = p["long_min"], p["long_max"]
    wanted = {p["decode_prompt"], max(1, lo // 2), *(round(lo + (hi - lo) * i / 4)
                                                     for i in range(5))}  # fmt: skip
    lengths: list[int] = []
    for n in sorted(wanted):
        if not lengths or n - lengths[-1] >= min_gap:
            lengths.append(n)
    lengths[-1] = hi  # the last kept is within min_gap of hi, or is hi
    return lengths


def flops_per_token() -> float:
    """Matmul FLOPs of one token through the bundled model's layers (2 × weights)."""
    s = bundled_shape("target")
    h, kv = s["hidden_size"], s["num_key_value_heads"] * s["head_dim"]
    q = s["num_attention_heads"] * s["head_dim"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * s["intermediate_size"]
    return 2.0 * per_layer * s["num_hidden_layers"]


def _ids(times: dict) -> dict[int, list[float]]:
    return {int(k): v for k, v in times.items()}


LAB = Disaggregation()
