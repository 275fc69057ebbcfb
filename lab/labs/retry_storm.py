"""Timeouts and retry storms: offered vs useful load under four client retry policies.

The bundled engine's server (a child process on loopback, bounded queue: 429 beyond it)
gets Poisson load at a fraction of its capacity (measured first with a closed loop). A
baseline run with no retries measures the E2E latency at that load; the client timeout is
then set *below the tail*, at a percentile of that baseline. Then, at the same arrival rate:

- immediate retries (naive): every timeout or 429 is retried at once, up to max_retries;
- exponential backoff with full jitter;
- backoff plus a retry budget (a token bucket: each request adds `budget` tokens, each
  retry takes one), as gRPC and Finagle do.

Offered load = attempts/s, useful load = requests/s that succeeded. Predicted bounds:
offered ≤ λ·(1 + max_retries) for the unbounded policies, ≤ λ·(1 + budget) + cap/T with a
budget.
"""

from __future__ import annotations

from collections.abc import Iterator

from lab.engine.server.launch import spawn, wait_idle
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.loadgen import LoadConfig, run

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"offered-bound": 0.05}

POLICIES = ("none", "immediate", "backoff", "budget")


class RetryStorm(Lab):
    slug = "retry-storm"
    title = "Timeouts and retry storms: offered vs useful load by retry policy"
    summary = (
        "Poisson load on the bundled engine's server at a fraction of its measured "
        "capacity; the client timeout sits below the tail (a percentile of the latency "
        "measured with no retries). Naive immediate retries turn every timeout into another "
        "attempt, which adds load, which makes more timeouts: offered load (attempts/s) "
        "climbs while useful load (successful requests/s) falls. Backoff with jitter "
        "spreads the retries out; a retry budget caps them at a fraction of the traffic. "
        "x: policy (0 none, 1 immediate, 2 backoff+jitter, 3 budget)."
    )
    topics = ("timeouts-retries", "serving-design")
    params = (
        Param("load", "Arrival rate as a fraction of capacity", "float", 0.9, min=0.1, max=3.0),
        Param(
            "timeout_percentile",
            "Client timeout at this percentile of the no-retry latency",
            "float",
            75.0,
            min=50,
            max=99.9,
            unit="%",
        ),
        Param("max_retries", "Retries per request at most", "int", 3, min=1, max=10),
        Param("budget", "Retry budget (retries per request)", "float", 0.1, min=0.01, max=1.0),
        Param("seconds_per_policy", "Seconds per policy", "float", 15.0, min=3, max=30, unit="s"),
        Param("max_num_seqs", "Server batch slots", "int", 4, min=1, max=32),
        Param("max_queue", "Server queue (429 beyond)", "int", 16, min=0, max=256),
        Param(
            "server_aborts",
            "Server aborts requests whose client left",
            "bool",
            False,
            help="off: the server keeps decoding timed-out attempts (as behind a proxy that "
            "hides the disconnect), so every retry adds real work",
        ),
        Param("seed", "Arrival seed", "int", 0, min=0, max=2**31 - 1),
    )
    series = (
        Series("offered", "Offered load (attempts/s)"),
        Series("useful", "Useful load (successful req/s)"),
        Series("goodput", "First-try successes (req/s)"),
        Series(
            "offered-bound",
            "Offered-load bound",
            "predicted",
            predicts="offered",
            mode="markers",
            claim="bound",
            band=BANDS["offered-bound"],
            bound_side="upper",
        ),
    )
    chart = Chart("retry policy (0 none · 1 immediate · 2 backoff · 3 budget)", "requests/s")
    time_limit_s = 300

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        common = dict(input_len=64, output_len=32, ignore_eos=True, seed=p["seed"])
        server = (
            "--max-num-seqs",
            str(p["max_num_seqs"]),
            "--max-queue",
            str(p["max_queue"]),
            "--device",
            ctx.device,
        ) + (() if p["server_aborts"] else ("--no-abort-on-disconnect",))
        with spawn(*server) as url:
            calib = run(
                LoadConfig(
                    base_url=url,
                    concurrency=p["max_num_seqs"],
                    num_requests=3 * p["max_num_seqs"],
                    **common,
                )
            )
            rate = p["load"] * calib["summary"]["request_throughput"]
            seconds = p["seconds_per_policy"]
            load = dict(base_url=url, rate=rate, num_requests=None, duration_s=seconds, **common)
            # A baseline with no timeout and no retries puts the timeout below its tail.
            baseline = run(LoadConfig(**load))
            e2el = sorted(r["e2e"] for r in baseline["requests"] if r["success"])
            if not e2el:
                raise RuntimeError("No request completed in the baseline run.")
            timeout = e2el[min(len(e2el) - 1, int(len(e2el) * p["timeout_percentile"] / 100))]
            ctx.summary["arrival_rate"] = round(rate, 3)
            ctx.summary["timeout_s"] = round(timeout, 4)
            for x, policy in enumerate(POLICIES):
                wait_idle(
                    url, ctx.check_cancel
                )  # orphaned work from the last policy must not carry over
                config = LoadConfig(
                    **load,
                    timeout_s=timeout,
                    retry=policy,
                    max_retries=p["max_retries"],
                    budget_ratio=p["budget"],
                )
                result = run(config)
                s = result["summary"]
                offered, useful = s["offered_load"] or 0.0, s["useful_load"] or 0.0
                first_try = (
                    sum(r["success"] and len(r["attempts"]) == 1 for r in result["requests"])
                    / result["duration_s"]
                )
                bound = rate * (1 + (0 if policy == "none" else p["max_retries"]))
                if policy == "budget":
                    bound = rate * (1 + p["budget"]) + config.budget_cap / seconds
                extra = {
                    "policy": policy,
                    "attempts_per_request": s["attempts_per_request"],
                    "failed": s["failed"],
                    "requests": s["requests"],
                    "outcomes": s["outcomes"],
                }
                yield Point("offered", x, offered, {**extra, "predicted": bound})
                yield Point("useful", x, useful, extra)
                yield Point("goodput", x, first_try, extra)
                yield Point("offered-bound", x, bound)
                ratio = round(offered / useful, 3) if useful else None  # None: nothing useful
                ctx.summary[f"{policy}_offered_over_useful"] = ratio


LAB = RetryStorm()
