"""Cancellation over HTTP: clients that leave early, and the compute a server spends on them.

The bundled engine runs behind its OpenAI-compatible server (`python -m lab.engine.server`,
a child process on loopback). At each level, n streaming clients ask for max_tokens, read k
chunks and close the connection. The aborting server notices `http.disconnect` and aborts
the request before the next engine step; the naive one (`--no-abort-on-disconnect`) decodes
to max_tokens for nobody. Measured from the server's own counters: tokens generated after
each disconnect and the seconds its engine thread was busy. Predicted: naive wastes
n·(max_tokens − k) tokens (less if a chunk carried several tokens), abort at most n (the
step already running when each client left).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx

from lab.engine.server.launch import read_metrics, spawn, wait_idle
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.loadgen.runner import run_blocking

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"naive-predicted": 0, "abort-predicted": 0}

MODES = {"abort": (), "naive": ("--no-abort-on-disconnect",)}


def levels(clients: int) -> list[int]:
    """Client counts measured: 1, then doubling, ending at `clients`."""
    out, n = [], 1
    while n < clients:
        out.append(n)
        n *= 2
    return [*out, clients]


def predicted_waste(mode: str, n: int, params: dict) -> int:
    return n * (params["max_tokens"] - params["leave_after"]) if mode == "naive" else n


async def leave_early(url: str, n: int, params: dict) -> None:
    body = {"model": "target", "prompt": "def main():", "max_tokens": params["max_tokens"],
            "ignore_eos": True, "stream": True}  # fmt: skip

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", f"{url}/completions", json=body) as r:
            r.raise_for_status()
            seen = 0
            async for line in r.aiter_lines():
                seen += line.startswith("data:") and line != "data: [DONE]"
                if seen >= params["leave_after"]:
                    return

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(one(client) for _ in range(n)))


class HttpCancellation(Lab):
    slug = "http-cancellation"
    title = "Cancellation over HTTP: abort on disconnect vs decoding for nobody"
    summary = (
        "The bundled engine behind its OpenAI-compatible server. At each level, n streaming "
        "clients ask for max_tokens, read k chunks and hang up. A server that listens for "
        "the disconnect aborts the request before the next engine step and frees its KV "
        "blocks; a naive one decodes to max_tokens for nobody. The chart counts the tokens "
        "the server generated after the clients had left (from its /metrics counters) and, "
        "on the right axis, the seconds its engine thread was busy."
    )
    topics = ("cancellation", "timeouts-retries")
    params = (
        Param("clients", "Clients that leave early", "int", 8, min=1, max=16),
        Param("max_tokens", "max_tokens each asks for", "int", 192, min=4, max=480,
              unit="tokens"),
        Param("leave_after", "Client reads this many chunks, then leaves", "int", 4, min=1,
              max=479, unit="chunks"),
    )  # fmt: skip
    series = (
        Series("naive", "No abort: tokens for nobody (measured)"),
        Series("naive-predicted", "No abort predicted", "predicted", predicts="naive",
               mode="lines", claim="bound", band=BANDS["naive-predicted"], bound_side="upper"),
        Series("abort", "Abort on disconnect: tokens for nobody (measured)"),
        Series("abort-predicted", "Abort on disconnect predicted (at most)", "predicted",
               predicts="abort", mode="lines",
               claim="bound", band=BANDS["abort-predicted"], bound_side="upper"),
        Series("naive-busy", "No abort: engine busy s", axis="y2", mode="lines+markers"),
        Series("abort-busy", "Abort: engine busy s", axis="y2", mode="lines+markers"),
    )  # fmt: skip
    chart = Chart("clients that left early", "tokens generated after the disconnect",
                  y2_title="engine busy seconds")  # fmt: skip
    time_limit_s = 240

    def check(self, params: dict) -> dict[str, str]:
        if params["leave_after"] >= params["max_tokens"]:
            return {"leave_after": "must be smaller than max_tokens"}
        return {}

    def predict(self, params: dict) -> list[Point]:
        return [
            Point(f"{mode}-predicted", n, predicted_waste(mode, n, params))
            for mode in MODES
            for n in levels(params["clients"])
        ]

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        for mode, args in MODES.items():
            with spawn(*args, "--device", ctx.device) as url:
                for n in levels(p["clients"]):
                    ctx.check_cancel()
                    before = read_metrics(url)
                    started = time.perf_counter()
                    run_blocking(leave_early(url, n, p))
                    after = wait_idle(url, ctx.check_cancel)
                    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                    waste = delta.get("tokens_after_disconnect_total", 0)
                    busy = delta.get("engine_busy_seconds_total", 0)
                    extra = {
                        "predicted": predicted_waste(mode, n, p),
                        "generated_tokens": delta.get("generated_tokens_total", 0),
                        "aborted": delta.get("aborted_requests_total", 0),
                        "wall_s": time.perf_counter() - started,
                        "kv_blocks_allocated_after": after.get("kv_blocks_allocated"),
                    }
                    yield Point(mode, n, waste, extra)
                    yield Point(f"{mode}-busy", n, busy)
                    ctx.summary[f"{mode}_tokens_for_nobody_{n}"] = waste
                    ctx.summary[f"{mode}_engine_busy_s_{n}"] = round(busy, 4)


LAB = HttpCancellation()
