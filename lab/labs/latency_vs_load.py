"""Latency vs load: sweep the request rate against the bundled server and find the knee.

The bundled engine runs behind its OpenAI-compatible server (a child process on loopback);
`lab.loadgen` sends Poisson arrivals at each rate for a fixed time and measures, as vLLM's
serving benchmark defines them, TTFT and TPOT (p50 and p99) and the completed requests/s.

Prediction: first the lab measures the server's capacity with a closed loop of max_num_seqs
clients (requests/s when every batch slot stays busy). Below capacity the server should
complete what is offered; above it throughput flattens at capacity and queueing makes TTFT
grow without bound: throughput = min(rate, capacity), the knee at the capacity.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from lab.engine.server.launch import spawn
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.loadgen import LoadConfig, run

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"throughput-predicted": 0.25}
CAPACITY_REPEATS = 3  # closed loops measuring capacity (their median is used)


def rates(params: dict) -> list[float]:
    top, n = params["max_rate"], params["levels"]
    return [round(top * (i + 1) / n, 3) for i in range(n)]


class LatencyVsLoad(Lab):
    slug = "latency-vs-load"
    title = "Latency vs load: TTFT and TPOT as the request rate climbs past capacity"
    summary = (
        "Poisson arrivals at rising rates against the bundled engine's OpenAI-compatible "
        "server, measured with the lab's load generator (vLLM's metric definitions). First "
        "a closed loop of max_num_seqs clients measures the capacity (requests/s with every "
        "batch slot busy). Below it the server completes what is offered and TTFT stays "
        "near one prefill; past it throughput flattens at the capacity (right axis, "
        "predicted min(rate, capacity)) and the queue makes TTFT p99 climb — the knee. TPOT "
        "grows more gently: a bigger batch makes each decode step a little slower."
    )
    topics = ("capacity-planning", "full-stack-latency", "continuous-batching")
    params = (
        Param("max_rate", "Highest request rate", "float", 16.0, min=0.5, max=200, unit="req/s"),
        Param("levels", "Rates measured (evenly up to the highest)", "int", 5, min=2, max=10),
        Param("seconds_per_level", "Seconds per rate", "float", 8.0, min=2, max=30, unit="s"),
        Param("input_len", "Prompt length", "int", 64, min=1, max=256, unit="tokens"),
        Param("output_len", "Output length", "int", 32, min=2, max=200, unit="tokens"),
        Param("max_num_seqs", "Server batch slots (max_num_seqs)", "int", 8, min=1, max=32),
        Param("seed", "Arrival seed", "int", 0, min=0, max=2**31 - 1),
    )
    series = (
        Series("ttft-p50", "TTFT p50 (ms)"),
        Series("ttft-p99", "TTFT p99 (ms)"),
        Series("tpot-p50", "TPOT p50 (ms)"),
        Series("tpot-p99", "TPOT p99 (ms)"),
        Series("throughput", "Completed req/s (measured)", axis="y2"),
        Series(
            "throughput-predicted",
            "min(rate, capacity)",
            "predicted",
            predicts="throughput",
            axis="y2",
            mode="lines",
            claim="estimate",
            band=BANDS["throughput-predicted"],
        ),
    )
    chart = Chart(
        "offered request rate (req/s)", "latency (ms)", y2_title="completed req/s", y_type="log"
    )
    time_limit_s = 600

    def check(self, params: dict) -> dict[str, str]:
        budget = params["levels"] * params["seconds_per_level"]
        if budget > 150:
            return {"seconds_per_level": f"levels × seconds must be ≤ 150 s (is {budget:g})"}
        return {}

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        common = dict(
            input_len=p["input_len"], output_len=p["output_len"], ignore_eos=True, seed=p["seed"]
        )
        server = ("--max-num-seqs", str(p["max_num_seqs"]), "--device", ctx.device)
        with spawn(*server) as url:
            capacity = self._capacity(ctx, url, p, common)
            for rate in rates(p):
                ctx.check_cancel()
                result = run(
                    LoadConfig(
                        base_url=url,
                        rate=rate,
                        num_requests=None,
                        duration_s=p["seconds_per_level"],
                        **common,
                    )
                )
                s = result["summary"]
                extra = {
                    "completed": s["completed"],
                    "failed": s["failed"],
                    "duration_s": result["duration_s"],
                }
                for metric in ("ttft", "tpot"):
                    stats = s[f"{metric}_ms"]
                    for q, key in (("p50", "median"), ("p99", "p99")):
                        if stats[key] is not None:
                            yield Point(f"{metric}-{q}", rate, stats[key], extra)
                predicted = min(rate, capacity)
                yield Point(
                    "throughput",
                    rate,
                    s["request_throughput"] or 0.0,
                    {**extra, "predicted": predicted},
                )
                yield Point("throughput-predicted", rate, predicted)
                ctx.summary[f"ttft_p99_ms_at_{rate:g}"] = round(s["ttft_ms"]["p99"] or 0, 1)

    @staticmethod
    def _capacity(ctx: RunContext, url: str, p: dict, common: dict) -> float:
        """Completed req/s of a closed loop at max_num_seqs in flight: the median of
        CAPACITY_REPEATS loops, after warm-up requests that are not recorded."""
        loops = []
        for i in range(CAPACITY_REPEATS):
            ctx.check_cancel()
            result = run(LoadConfig(
                base_url=url, concurrency=p["max_num_seqs"],
                num_requests=2 * p["max_num_seqs"],
                warmup=p["max_num_seqs"] if i == 0 else 0, **common))  # fmt: skip
            loops.append(result["summary"]["request_throughput"])
        capacity = statistics.median(loops)
        ctx.summary.update({
            "capacity_req_s": round(capacity, 3),
            "capacity_spread": f"{min(loops):.3g} … {max(loops):.3g} req/s over "
                               f"{len(loops)} closed loops",
            "warmup": f"discarded: {p['max_num_seqs']} unrecorded requests before the "
                      "capacity loops; each rate level is one window of many requests "
                      "(TTFT/TPOT p50 and p99 drawn, not repeats)",
        })  # fmt: skip
        return capacity


LAB = LatencyVsLoad()
