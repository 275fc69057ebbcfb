"""A request's hops: the sequential stretches of its life that the server reports in a
`Server-Timing` header and in a stream's final chunk (`server_timing`).

Plain Python, so that labs and tests can name the hops without importing the server.
"""

from __future__ import annotations

HOPS = ("tokenize", "queue", "prefill", "decode", "stream")


def server_timing(hops: dict[str, float]) -> str:
    """The `Server-Timing` header value for hops in milliseconds."""
    return ", ".join(f"{name};dur={ms:.3f}" for name, ms in hops.items())


def hop_times_ms(
    t0: float, tokenized: float, metrics: dict, end: float, detok: float
) -> dict[str, float]:
    """The sequential hops (ms) from the handler's clock and the engine's timestamps
    (`perf_counter` seconds), plus `detokenize` (summed, overlapping decode) and `total`."""
    sched = metrics.get("first_scheduled") or end
    times = metrics.get("token_times") or []
    first, last = (times[0], times[-1]) if times else (end, end)
    marks = [t0, tokenized, max(sched, tokenized), max(first, sched), max(last, first), end]
    hops = {name: (b - a) * 1000 for name, a, b in zip(HOPS, marks[:-1], marks[1:], strict=True)}
    hops["detokenize"] = detok * 1000
    hops["total"] = (end - t0) * 1000
    return hops
