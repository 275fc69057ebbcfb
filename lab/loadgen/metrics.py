"""Per-request records and the benchmark summary, with vLLM's serving-benchmark definitions.

The definitions follow vLLM's `benchmarks/serve` (`vllm bench serve`, formerly
`benchmarks/benchmark_serving.py`, `calculate_metrics`), measured on the client:

- TTFT (time to first token): from the start of the attempt that succeeded to the first
  streamed chunk with non-empty text. A leading empty chunk (the chat role delta) does not
  count. It includes queueing and prefill on the server and the network both ways.
- E2EL (end-to-end latency): from the start of that attempt to the end of the stream
  (`data: [DONE]`).
- TPOT (time per output token, excluding the first): `(E2EL - TTFT) / (output_tokens - 1)`;
  undefined (None) when a request produced at most one token. One value per request, so the
  mean TPOT weights every request alike however long its output.
- ITL (inter-token latency): the gaps between token-carrying chunks, one value per *token*:
  a chunk that brings n tokens g seconds after the previous one contributes n values of g/n
  (vLLM records one value per chunk; per token keeps multi-token chunks, as from speculative
  decoding or a server that batches its writes, from hiding tokens). The first chunk
  contributes nothing; its gap is TTFT.
- Tokens per chunk: the deltas of `usage.completion_tokens` when the server reports usage in
  every chunk with text (`stream_options: {"include_usage": true, "continuous_usage_stats":
  true}`, as vLLM and `lab.engine.server` do); else the count a local tokenizer gives for the
  chunk's text; else 1 per non-empty chunk. A request's output_tokens is the final `usage` when the
  server sent one, else the sum over chunks.

The summary (`summarize`) adds the load-side view used for retry and overload experiments:

- request_throughput: completed requests / duration; output_throughput and
  total_token_throughput: generated (and prompt + generated) tokens of completed requests /
  duration. The duration runs from the first send to the last completion.
- offered_load: attempts / duration (what the server was asked to do, retries included);
  useful_load: successful requests / duration (what clients got). Under a retry storm the
  first grows while the second falls; attempts_per_request is their amplification.
- goodput (vLLM's `--goodput`): completed requests / duration that also met every given SLO
  (`ttft_ms`, `tpot_ms`, `e2el_ms`, each "at most"). As in vLLM a request with at most one
  output token counts as TPOT 0; a completed request that streamed no text has no TTFT and
  so misses a TTFT SLO.
- Latency statistics (mean, median, p90, p99, std; numpy's default linear-interpolated
  percentiles and population std, as vLLM) over completed requests only; failed requests
  count in `failed` and in the offered load. All times in the summary are milliseconds;
  statistics of an empty set are None.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")
LATENCY_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
STAT_KEYS = ("mean", "median", "p90", "p99", "std")


@dataclass
class Attempt:
    """One HTTP attempt. Times are `time.perf_counter()` seconds.

    outcome: "ok", "timeout" (the client's total per-attempt deadline), "http 429: <message>",
    "http 503: <message>" (any status; the message from the OpenAI-style error body), or
    "error: <what>" (connection errors, an in-stream error event, a stream cut short).
    """

    start: float
    end: float
    outcome: str

    @property
    def kind(self) -> str:
        """The outcome without its message: "ok", "timeout", "http 503", "error"."""
        return self.outcome.split(":", 1)[0]


@dataclass
class StreamChunk:
    """A streamed chunk of the successful attempt: arrival (seconds since the attempt's
    start), its text and the number of tokens it carried."""

    time: float
    text: str
    tokens: int


@dataclass
class RequestRecord:
    """One logical request across its retries.

    start: when its first attempt was sent (perf_counter seconds). prompt_tokens: the
    server's `usage.prompt_tokens` when sent, else the local count. chunk_times (seconds
    since the start of the successful attempt) and chunk_tokens describe that attempt's
    stream, one entry per chunk with choices; ttft, e2e and itl are in seconds.
    """

    index: int
    start: float
    prompt_tokens: int
    output_tokens: int = 0
    success: bool = False
    error: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    ttft: float | None = None
    e2e: float | None = None
    itl: list[float] = field(default_factory=list)
    server_timing: dict[str, Any] | None = None

    @property
    def tpot(self) -> float | None:
        return tpot(self.ttft, self.e2e, self.output_tokens)

    def complete(
        self, chunks: Sequence[StreamChunk], e2e: float, output_tokens: int | None = None
    ) -> None:
        """Mark the request successful with its stream: chunk offsets from the successful
        attempt's start, e2e to the end of the stream; output_tokens from the server's final
        usage, else the sum over chunks."""
        self.success, self.error = True, ""
        self.chunk_times = [c.time for c in chunks]
        self.chunk_tokens = [c.tokens for c in chunks]
        self.ttft, self.itl = stream_latencies(chunks)
        self.e2e = e2e
        self.output_tokens = output_tokens if output_tokens is not None else sum(self.chunk_tokens)

    def to_dict(self, origin: float = 0.0) -> dict[str, Any]:
        """JSON-ready, with `start` and attempt times as seconds since `origin`."""
        out = asdict(self)
        out["start"] = self.start - origin
        out["attempts"] = [
            {"start": a.start - origin, "end": a.end - origin, "outcome": a.outcome}
            for a in self.attempts
        ]
        out["tpot"] = self.tpot
        return out


def chunk_token_counts(
    texts: Sequence[str],
    cumulative: Sequence[int | None],
    count_tokens: Callable[[str], int] | None = None,
) -> list[int]:
    """Tokens per chunk: `usage.completion_tokens` deltas when every chunk with text carried
    usage (`cumulative[i]` is that chunk's running total; a chunk without usage, such as a
    chat stream's role-only opener, counts 0 and anything it held shows in the next delta),
    else `count_tokens(text)`, else 1 per non-empty chunk."""
    if any(texts) and all(c is not None for t, c in zip(texts, cumulative, strict=True) if t):
        counts, before = [], 0
        for total in cumulative:
            counts.append(0 if total is None else max(0, total - before))
            before = before if total is None else max(before, total)
        return counts
    if count_tokens is not None:
        return [count_tokens(t) if t else 0 for t in texts]
    return [1 if t else 0 for t in texts]


def stream_latencies(chunks: Sequence[StreamChunk]) -> tuple[float | None, list[float]]:
    """(TTFT, per-token ITL) of a stream; TTFT is None when no chunk had text."""
    first = next((i for i, c in enumerate(chunks) if c.text), None)
    if first is None:
        return None, []
    ttft = previous = chunks[first].time
    itl: list[float] = []
    for chunk in chunks[first + 1 :]:
        if chunk.tokens > 0:
            itl.extend([(chunk.time - previous) / chunk.tokens] * chunk.tokens)
            previous = chunk.time
    return ttft, itl


def tpot(ttft: float | None, e2e: float | None, output_tokens: int) -> float | None:
    """(E2EL - TTFT) / (output_tokens - 1); None for at most one token."""
    if ttft is None or e2e is None or output_tokens <= 1:
        return None
    return (e2e - ttft) / (output_tokens - 1)


def latency_stats(seconds: Sequence[float]) -> dict[str, float | None]:
    """mean, median, p90, p99, std in milliseconds (None for no values)."""
    if not seconds:
        return dict.fromkeys(STAT_KEYS)
    ms = np.asarray(seconds, dtype=float) * 1000.0
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return {
        "mean": float(ms.mean()),
        "median": float(p50),
        "p90": float(p90),
        "p99": float(p99),
        "std": float(ms.std()),
    }


def meets_slo(record: RequestRecord, slo: Mapping[str, float]) -> bool:
    """Whether a completed request met every SLO (ms, "at most"), vLLM's goodput rule."""
    if not record.success:
        return False
    values = {
        "ttft_ms": None if record.ttft is None else record.ttft * 1000,
        "tpot_ms": (record.tpot or 0.0) * 1000,
        "e2el_ms": None if record.e2e is None else record.e2e * 1000,
    }
    return all(values[k] is not None and values[k] <= limit for k, limit in slo.items())


def check_slo(slo: Mapping[str, float]) -> None:
    """ValueError unless every key is one of SLO_KEYS with a positive limit."""
    for key, limit in slo.items():
        if key not in SLO_KEYS:
            raise ValueError(f"unknown SLO {key!r}; use {', '.join(SLO_KEYS)}")
        if not limit > 0:
            raise ValueError(f"SLO {key} must be > 0 ms")


def summarize(
    records: Sequence[RequestRecord],
    duration_s: float,
    slo: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The benchmark summary (see the module docstring); rates are None when duration_s is 0.

    Keys: requests, completed, failed, attempts, duration_s, total_input_tokens,
    total_output_tokens, request_throughput, output_throughput, total_token_throughput,
    offered_load, useful_load, attempts_per_request, slo, good_requests, goodput (None
    without an SLO), outcomes (attempt outcome kind -> count), and ttft_ms, tpot_ms, itl_ms,
    e2el_ms (each a dict of mean, median, p90, p99, std).
    """
    slo = dict(slo or {})
    check_slo(slo)
    done = [r for r in records if r.success]
    attempts = sum(len(r.attempts) for r in records)
    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    good = sum(meets_slo(r, slo) for r in done) if slo else None

    def per_second(count: float | None) -> float | None:
        return None if count is None or duration_s <= 0 else count / duration_s

    outcomes = collections.Counter(a.kind for r in records for a in r.attempts)
    return {
        "requests": len(records),
        "completed": len(done),
        "failed": len(records) - len(done),
        "attempts": attempts,
        "duration_s": duration_s,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_second(len(done)),
        "output_throughput": per_second(total_out),
        "total_token_throughput": per_second(total_in + total_out),
        "offered_load": per_second(attempts),
        "useful_load": per_second(len(done)),
        "attempts_per_request": attempts / len(records) if records else None,
        "slo": slo,
        "good_requests": good,
        "goodput": per_second(good),
        "outcomes": dict(sorted(outcomes.items())),
        "ttft_ms": latency_stats([r.ttft for r in done if r.ttft is not None]),
        "tpot_ms": latency_stats([t for r in done if (t := r.tpot) is not None]),
        "itl_ms": latency_stats([x for r in done for x in r.itl]),
        "e2el_ms": latency_stats([r.e2e for r in done if r.e2e is not None]),
    }


def format_summary(summary: Mapping[str, Any], title: str = "Serving Benchmark Result") -> str:
    """The summary as vLLM prints it (same labels, plus the load and outcome lines)."""

    def num(value: Any, digits: int = 2) -> str:
        if value is None:
            return "n/a"
        return f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    lines = [f"{title:=^50}"]

    def row(label: str, value: Any, digits: int = 2) -> None:
        lines.append(f"{label:<40} {num(value, digits)}")

    row("Successful requests:", summary["completed"])
    row("Failed requests:", summary["failed"])
    row("Benchmark duration (s):", summary["duration_s"])
    row("Total input tokens:", summary["total_input_tokens"])
    row("Total generated tokens:", summary["total_output_tokens"])
    row("Request throughput (req/s):", summary["request_throughput"])
    if summary["slo"]:
        row("Request goodput (req/s):", summary["goodput"])
        slo = ", ".join(f"{k} <= {v:g}" for k, v in summary["slo"].items())
        lines.append(f"{'Goodput SLOs:':<40} {slo}")
    row("Output token throughput (tok/s):", summary["output_throughput"])
    row("Total Token throughput (tok/s):", summary["total_token_throughput"])
    row("Offered load (attempts/s):", summary["offered_load"])
    row("Useful load (successful req/s):", summary["useful_load"])
    row("Attempts per request:", summary["attempts_per_request"])
    outcomes = ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items())
    lines.append(f"{'Attempt outcomes:':<40} {outcomes or 'n/a'}")
    sections = [
        ("ttft_ms", "TTFT", "Time to First Token"),
        ("tpot_ms", "TPOT", "Time per Output Token (excl. 1st token)"),
        ("itl_ms", "ITL", "Inter-token Latency"),
        ("e2el_ms", "E2EL", "End-to-end Latency"),
    ]
    for key, short, heading in sections:
        lines.append(f"{heading:-^50}")
        stats = summary[key]
        for stat, label in (("mean", "Mean"), ("median", "Median"), ("p90", "P90"), ("p99", "P99")):
            row(f"{label} {short} (ms):", stats[stat])
    lines.append("=" * 50)
    return "\n".join(lines)
