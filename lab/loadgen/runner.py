"""A benchmark run: prompts, the load profile, retries, and the result as a JSON-ready dict.

`run(LoadConfig(base_url=..., concurrency=4, num_requests=20))` returns
`{"config", "duration_s", "summary", "requests"}`: the config as run (the model resolved, an
API key redacted, an infinite rate as "inf"), the duration from the first send to the last
completion, `metrics.summarize` of the records, and every request's record (times in
seconds since the first send). `arun` is the same as a coroutine (for callers already in an
event loop); `sweep(config, rates)` runs one open-loop benchmark per rate.

When to stop: after `num_requests` requests, or when `duration_s` has passed, whichever
comes first. Requests already sent when the time is up are waited for (retries included,
each attempt bounded by `timeout_s`), so every record is complete and the run's duration
may exceed `duration_s` by the tail of the last requests. With neither `concurrency` nor
`rate` the run is closed-loop with one worker (guidellm's `synchronous`).

Prompts, as vLLM's random dataset but readable text: windows of a fixed token corpus (a
seeded choice of the Python standard library's top-level `.py` files, tokenized with the
bundled `lab/engine/weights/tokenizer.json` or `tokenizer`), decoded back to text, so a
prompt is about `input_len` tokens (re-tokenizing the decoded window can merge a few tokens
at its edges). The lengths of prompt and output (`max_tokens`) follow `len_dist`:

- fixed: exactly the given length;
- uniform: an integer in [len·(1−range_ratio), len·(1+range_ratio)] (vLLM's random dataset);
- normal: round(N(len, (len·range_ratio)²));
- exponential: round(Exp(mean=len)), range_ratio unused;

never below 1. Pass `ignore_eos=True` for outputs of exactly `max_tokens` tokens.
Seeded: the same seed gives the same prompts, lengths, arrival times and backoff jitter.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import math
import os
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from tokenizers import Tokenizer

from lab.loadgen.arrivals import arrival_times, check_rate
from lab.loadgen.client import (
    ENDPOINTS,
    AttemptResult,
    build_payload,
    make_client,
    resolve_model,
    send,
)
from lab.loadgen.metrics import (
    RequestRecord,
    StreamChunk,
    check_slo,
    chunk_token_counts,
    summarize,
)
from lab.loadgen.retry import Retrier, RetryPolicy

BUNDLED_TOKENIZER = Path(__file__).resolve().parents[1] / "engine" / "weights" / "tokenizer.json"
LEN_DISTS = ("fixed", "uniform", "normal", "exponential")
CORPUS_TOKENS = 100_000  # enough distinct windows; tokenizing it takes a fraction of a second
CORPUS_SEED = 0  # the corpus is fixed; the run's seed picks windows from it

Progress = Callable[[RequestRecord], None]

T = TypeVar("T")


@dataclass
class LoadConfig:
    base_url: str  # e.g. http://127.0.0.1:8100/v1
    model: str | None = None  # None: the first id of GET {base_url}/models
    endpoint: str = "completions"  # or "chat"
    concurrency: int | None = None  # closed loop: this many workers
    rate: float | None = None  # open loop: requests/s (math.inf: all at once)
    arrival: str = "poisson"  # poisson | gamma | constant (open loop)
    burstiness: float = 1.0  # gamma shape; 1 = Poisson, < 1 burstier
    num_requests: int | None = 100
    duration_s: float | None = None
    input_len: int = 64
    output_len: int = 64
    len_dist: str = "fixed"
    range_ratio: float = 0.0
    temperature: float = 0.0
    ignore_eos: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = None
    timeout_s: float | None = None  # total per-attempt deadline; None: none
    retry: str = "none"  # none | immediate | backoff | budget
    max_retries: int = 3
    backoff_base: float = 0.1
    backoff_cap: float = 2.0
    budget_ratio: float = 0.1
    budget_cap: float = 10.0
    tokenizer: str | None = None  # a tokenizer.json; None: the bundled one
    seed: int = 0
    slo: dict[str, float] = field(default_factory=dict)  # ttft_ms, tpot_ms, e2el_ms
    warmup: int = 0  # requests sent (one attempt each, not recorded) before the benchmark

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"the URL must start with http:// or https://, got {self.base_url}")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {', '.join(ENDPOINTS)}")
        if self.concurrency is not None and self.rate is not None:
            raise ValueError("give concurrency (closed loop) or rate (open loop), not both")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        check_rate(1.0 if self.rate is None else self.rate, self.arrival, self.burstiness)
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("give num_requests, duration_s or both")
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError("num_requests must be >= 1")
        if self.duration_s is not None and not self.duration_s > 0:
            raise ValueError("duration must be > 0 s")
        if self.rate == math.inf and self.num_requests is None:
            raise ValueError("an infinite rate needs num_requests")
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("input and output lengths must be >= 1")
        if self.len_dist not in LEN_DISTS:
            raise ValueError(f"len_dist must be one of {', '.join(LEN_DISTS)}")
        if not 0 <= self.range_ratio < 1:
            raise ValueError("range_ratio must be in [0, 1)")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError("timeout must be > 0 s")
        if self.tokenizer is not None and not Path(self.tokenizer).is_file():
            raise ValueError(f"no tokenizer file at {self.tokenizer}")
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")
        check_slo(self.slo)
        self.retry_policy()  # validates the retry fields

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            self.retry,
            self.max_retries,
            self.backoff_base,
            self.backoff_cap,
            self.budget_ratio,
            self.budget_cap,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the API key redacted, an infinite rate as "inf"."""
        out = dataclasses.asdict(self)
        if self.api_key:
            out["api_key"] = "***"
        if self.rate == math.inf:
            out["rate"] = "inf"
        return out


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


@functools.lru_cache(maxsize=4)
def corpus_ids(tokenizer_path: str) -> tuple[int, ...]:
    """About CORPUS_TOKENS tokens of stdlib source, from a fixed seeded choice of files."""
    files = sorted(Path(os.__file__).parent.glob("*.py"))
    random.Random(CORPUS_SEED).shuffle(files)
    tokenizer, ids = load_tokenizer(tokenizer_path), []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        ids.extend(tokenizer.encode(text, add_special_tokens=False).ids)
        if len(ids) >= CORPUS_TOKENS:
            break
    return tuple(ids)


def sample_len(length: int, dist: str, range_ratio: float, rng: random.Random) -> int:
    """A length drawn from `dist` around `length` (see the module docstring), at least 1."""
    if dist == "uniform":
        low = max(1, int(length * (1 - range_ratio)))
        return rng.randint(low, max(low, int(length * (1 + range_ratio))))
    if dist == "normal":
        return max(1, round(rng.gauss(length, length * range_ratio)))
    if dist == "exponential":
        return max(1, round(rng.expovariate(1.0 / length)))
    return length


@dataclass(frozen=True)
class Prompt:
    text: str
    tokens: int  # local count (the server's usage.prompt_tokens replaces it when sent)
    max_tokens: int


class PromptSource:
    """Seeded prompts: corpus windows of sampled length, each with a sampled max_tokens."""

    def __init__(self, config: LoadConfig, rng: random.Random):
        self.config, self.rng = config, rng
        path = config.tokenizer or str(BUNDLED_TOKENIZER)
        self.tokenizer, self.corpus = load_tokenizer(path), corpus_ids(path)

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def next(self) -> Prompt:
        c, rng, corpus = self.config, self.rng, self.corpus
        length = sample_len(c.input_len, c.len_dist, c.range_ratio, rng)
        max_tokens = sample_len(c.output_len, c.len_dist, c.range_ratio, rng)
        start = rng.randrange(len(corpus))
        text = self.tokenizer.decode([corpus[(start + i) % len(corpus)] for i in range(length)])
        return Prompt(text, self.count(text), max_tokens)


class _Bench:
    """One run's state: the client, the prompt stream, the retrier and the records."""

    def __init__(
        self, config: LoadConfig, client: httpx.AsyncClient, model: str, progress: Progress | None
    ):
        self.config, self.client, self.model, self.progress = config, client, model, progress
        self.url = config.base_url + ENDPOINTS[config.endpoint]
        self.prompts = PromptSource(config, random.Random(f"{config.seed}:prompts"))
        self.retrier = Retrier(config.retry_policy(), random.Random(f"{config.seed}:retry"))
        self.records: list[RequestRecord] = []
        self.sent = 0

    def payload(self, prompt: Prompt) -> dict[str, Any]:
        c = self.config
        return build_payload(
            c.endpoint,
            self.model,
            prompt.text,
            prompt.max_tokens,
            c.temperature,
            c.ignore_eos,
            c.extra_body,
        )

    async def warmup(self) -> None:
        """config.warmup requests, one attempt each, at most `concurrency` at a time."""
        c = self.config
        prompts = PromptSource(c, random.Random(f"{c.seed}:warmup"))
        slots = asyncio.Semaphore(c.concurrency or c.warmup)

        async def one(prompt: Prompt) -> None:
            async with slots:
                await send(self.client, self.url, self.payload(prompt), c.endpoint, c.timeout_s)

        await asyncio.gather(*(one(prompts.next()) for _ in range(c.warmup)))

    async def request(self, index: int, prompt: Prompt) -> None:
        """One logical request, with its retries."""
        c = self.config
        self.retrier.on_request()
        payload = self.payload(prompt)
        record = RequestRecord(index, start=0.0, prompt_tokens=prompt.tokens)
        while True:
            result = await send(self.client, self.url, payload, c.endpoint, c.timeout_s)
            record.attempts.append(result.attempt)
            if result.ok:
                self.complete(record, result)
                break
            outcome = result.attempt.outcome
            decision = self.retrier.decide(outcome, len(record.attempts) - 1)
            if decision.delay is None:
                record.error = f"{outcome} ({decision.reason})"
                break
            await asyncio.sleep(decision.delay)
        record.start = record.attempts[0].start
        self.records.append(record)
        if self.progress is not None:
            self.progress(record)

    def complete(self, record: RequestRecord, result: AttemptResult) -> None:
        counts = chunk_token_counts(
            [c.text for c in result.chunks],
            [c.completion_tokens for c in result.chunks],
            self.prompts.count,
        )
        chunks = [
            StreamChunk(c.time, c.text, n) for c, n in zip(result.chunks, counts, strict=True)
        ]
        assert result.done is not None  # an "ok" attempt saw [DONE]
        record.complete(chunks, result.done, result.completion_tokens)
        if result.prompt_tokens is not None:
            record.prompt_tokens = result.prompt_tokens
        record.server_timing = result.server_timing

    async def closed_loop(self, workers: int, deadline: float | None) -> None:
        n = self.config.num_requests

        async def worker() -> None:
            while (n is None or self.sent < n) and (
                deadline is None or time.perf_counter() < deadline
            ):
                index, self.sent = self.sent, self.sent + 1
                await self.request(index, self.prompts.next())

        await asyncio.gather(*(worker() for _ in range(workers)))

    async def open_loop(self, rate: float, t0: float) -> None:
        c = self.config
        rng = random.Random(f"{c.seed}:arrivals")
        tasks = []
        for index, offset in enumerate(arrival_times(rate, rng, c.arrival, c.burstiness)):
            if c.num_requests is not None and index >= c.num_requests:
                break
            if c.duration_s is not None and offset >= c.duration_s:
                break
            prompt = self.prompts.next()
            if (wait := t0 + offset - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(self.request(index, prompt)))
        await asyncio.gather(*tasks)


async def arun(config: LoadConfig, progress: Progress | None = None) -> dict[str, Any]:
    """The benchmark as a coroutine; see `run`."""
    async with make_client(config.api_key) as client:
        model = await resolve_model(client, config.base_url, config.model)
        bench = _Bench(config, client, model, progress)
        if config.warmup:
            await bench.warmup()
        t0 = time.perf_counter()
        if config.rate is not None:
            await bench.open_loop(config.rate, t0)
        else:
            deadline = None if config.duration_s is None else t0 + config.duration_s
            await bench.closed_loop(config.concurrency or 1, deadline)
    records = sorted(bench.records, key=lambda r: r.index)
    first = min((r.start for r in records), default=t0)
    last = max((a.end for r in records for a in r.attempts), default=first)
    duration = last - first
    return {
        "config": dataclasses.replace(config, model=model).to_dict(),
        "duration_s": duration,
        "summary": summarize(records, duration, config.slo),
        "requests": [r.to_dict(origin=first) for r in records],
    }


def run(config: LoadConfig, progress: Progress | None = None) -> dict[str, Any]:
    """Run one benchmark (blocking; see the module docstring). `progress` is called with each
    request's record as it finishes. Raises `client.LoadgenError` when the server cannot be
    reached or names no model."""
    return run_blocking(arun(config, progress))


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, also from a thread whose event loop is already running (Playwright's
    sync API leaves one running in pytest's main thread; Jupyter has one): then it runs in a
    fresh thread with its own loop, and this thread blocks on it."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="loadgen") as pool:
        return pool.submit(asyncio.run, coro).result()


def sweep(
    config: LoadConfig, rates: Sequence[float], progress: Progress | None = None
) -> list[dict[str, Any]]:
    """One open-loop run per rate, in order (config's concurrency is dropped)."""
    return [run(dataclasses.replace(config, concurrency=None, rate=r), progress) for r in rates]
