"""Full-stack waterfall: a request's hops, stacked, and how each changes with load.

Every response from the bundled server carries its hops (tokenize, queue, prefill, decode,
stream; sequential, summing to the server's total) in `server_timing`. The lab sends Poisson
load at a few rates with `lab.loadgen` and stacks the mean of each hop per rate; beside it,
the client's own E2E latency, so the gap (HTTP, client parsing) shows too.

Predicted: the mean server total should equal the client's mean E2EL minus the time before
the handler starts and after its last write (a few ms on loopback), so the predicted line is
the sum of the hops; the measured client E2EL sits just above it.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

from lab.engine.server.launch import spawn
from lab.engine.server.timing import HOPS
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.latency_vs_load import rates
from lab.loadgen import LoadConfig, run

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"server-total": 0.05}


class Waterfall(Lab):
    slug = "waterfall"
    title = "Full-stack latency waterfall: where a request's time goes as load grows"
    summary = (
        "Each response from the bundled engine's server reports its hops: tokenize, queue "
        "(waiting for a batch slot), prefill (to the first token), decode (to the last) and "
        "stream (the last writes). The lab sends Poisson load at rising rates and stacks the "
        "mean of each hop per rate, with the client's measured end-to-end latency beside the "
        "stack. Watch queue and decode grow with load while tokenize and prefill stay put."
    )
    topics = ("full-stack-latency", "latency-levers")
    params = (
        Param("max_rate", "Highest request rate", "float", 12.0, min=0.5, max=200, unit="req/s"),
        Param("levels", "Rates measured", "int", 4, min=1, max=8),
        Param("seconds_per_level", "Seconds per rate", "float", 8.0, min=2, max=30, unit="s"),
        Param("input_len", "Prompt length", "int", 128, min=1, max=256, unit="tokens"),
        Param("output_len", "Output length", "int", 32, min=2, max=200, unit="tokens"),
        Param("max_num_seqs", "Server batch slots (max_num_seqs)", "int", 8, min=1, max=32),
        Param("seed", "Arrival seed", "int", 0, min=0, max=2**31 - 1),
    )
    series = (
        *(Series(hop, f"{hop} (mean ms)", mode="bar") for hop in HOPS),
        Series("client-e2el", "client E2EL (mean ms, measured)"),
        Series(
            "server-total",
            "sum of the hops",
            "predicted",
            predicts="client-e2el",
            mode="lines",
            claim="bound",
            band=BANDS["server-total"],
        ),
    )
    chart = Chart("offered request rate (req/s)", "ms per request (mean)")
    time_limit_s = 400

    def check(self, params: dict) -> dict[str, str]:
        budget = params["levels"] * params["seconds_per_level"]
        if budget > 120:
            return {"seconds_per_level": f"levels × seconds must be ≤ 120 s (is {budget:g})"}
        return {}

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        server = ("--max-num-seqs", str(p["max_num_seqs"]), "--device", ctx.device)
        with spawn(*server) as url:
            for rate in rates(p):
                ctx.check_cancel()
                result = run(
                    LoadConfig(
                        base_url=url,
                        rate=rate,
                        num_requests=None,
                        duration_s=p["seconds_per_level"],
                        input_len=p["input_len"],
                        output_len=p["output_len"],
                        ignore_eos=True,
                        seed=p["seed"],
                    )
                )
                timed = [r for r in result["requests"] if r["success"] and r["server_timing"]]
                if not timed:
                    raise RuntimeError(f"No request completed at {rate:g} req/s.")
                means = {h: statistics.fmean(r["server_timing"][h] for r in timed) for h in HOPS}
                total = sum(means.values())
                e2el = statistics.fmean(r["e2e"] for r in timed) * 1000
                for hop, ms in means.items():
                    yield Point(hop, rate, ms, {"requests": len(timed)})
                yield Point("client-e2el", rate, e2el, {"predicted": total, "requests": len(timed)})
                yield Point("server-total", rate, total)
                ctx.summary[f"queue_ms_at_{rate:g}"] = round(means["queue"], 2)
                ctx.summary[f"decode_ms_at_{rate:g}"] = round(means["decode"], 2)


LAB = Waterfall()
