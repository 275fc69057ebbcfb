"""A small discrete-time fleet simulator: N replicas, each a continuous-batching engine with
a KV budget in blocks, driven by a step-cost model (measured on the worker by the
long-context-admission lab). Pure Python, no torch, deterministic given a seed.

Each replica runs one step at a time; a step's duration is `StepCost.step_ms` of what it
computes (prefill tokens, decoding sequences, their context tokens). Short requests are routed
to a replica drawn at random (seeded; a random split of a Poisson stream is Poisson on
each replica), long ones round-robin, so the replicas are independent and each is
simulated on its own list of requests. Policies:

- fifo: no admission control. FCFS waiting queue, prefill first (vLLM V0 without chunked
  prefill): a step either prefills every waiting request that fits (the head blocks the
  queue when it does not) or decodes every running one. A long prefill is one long step.
- cap: as fifo, but a request whose prompt + output exceeds the token cap is rejected at
  the door (an HTTP 4xx, counted), never truncated.
- pool: as fifo, but the first `long_replicas` replicas take only long requests and the
  rest only short ones.
- chunked: a per-step token budget. Every running sequence decodes (1 token each), then
  the prefills of prompts up to `long_prefill_tokens` in FCFS order (chunked when the
  budget left is smaller), then at most one longer prefill's chunk takes what is left
  (like vLLM's long_prefill_token_threshold with one long partial prefill): shorts keep
  decoding, and new ones start, while a long prompt is prefilled over many steps.

KV: a sequence holds ceil(kv_tokens / block_size) blocks, kv_tokens = tokens whose K/V have
been computed (prompt + generated − 1 at most: the last sampled token's K/V is never
written). When a decoding sequence needs a block and none is free, the newest running
sequence is preempted (recompute, vLLM V1): its blocks are freed and it goes back to the
front of the queue, to prefill its prompt and the tokens generated so far again.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass, field

POLICIES = ("fifo", "cap", "pool", "chunked")


@dataclass(frozen=True)
class StepCost:
    """ms of one step = fixed + per prefill token + per decoding sequence + per context token
    the decoding sequences attend (their K/V read)."""

    fixed_ms: float
    prefill_token_ms: float
    decode_seq_ms: float
    context_token_ms: float

    def step_ms(self, prefill_tokens: int, decodes: int, context_tokens: int) -> float:
        return (self.fixed_ms + self.prefill_token_ms * prefill_tokens
                + self.decode_seq_ms * decodes
                + self.context_token_ms * context_tokens)  # fmt: skip


@dataclass(frozen=True)
class Request:
    rid: int
    arrival_s: float
    prompt: int
    output: int
    long: bool


@dataclass(frozen=True)
class FleetConfig:
    replicas: int
    kv_tokens: int  # per replica
    block_size: int
    max_seqs: int
    policy: str
    token_cap: int = 0  # cap: largest prompt + output admitted
    long_replicas: int = 1  # pool: replicas kept for long requests
    chunk_tokens: int = 2048  # chunked: tokens per step
    long_prefill_tokens: int = 32_768  # chunked: a longer prefill takes the leftover budget
    horizon_s: float = 60.0  # arrivals stop here; the run drains until 2 × horizon
    sample_s: float = 1.0  # how often replica state is recorded
    max_steps: int = 2_000_000  # per replica: the bound on work
    seed: int = 0  # routing of the short requests

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // self.block_size


def kv_tokens_held(prompt: int, output: int) -> int:
    """Tokens of K/V a finished request held at its largest: its prompt and every generated
    token but the last (whose K/V is never computed)."""
    return prompt + output - 1


def blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def trace(seed: int, short_rate: float, horizon_s: float, short_prompt: int, short_output: int,
          long_count: int, long_min: int, long_max: int,
          long_output: int) -> list[Request]:  # fmt: skip
    """Poisson short arrivals over [0, horizon) plus `long_count` long requests at evenly
    spaced times, lengths drawn uniformly in [long_min, long_max] (both seeded)."""
    rng = random.Random(seed)
    out: list[Request] = []
    t = rng.expovariate(short_rate)
    while t < horizon_s:
        out.append(Request(0, t, short_prompt, short_output, False))
        t += rng.expovariate(short_rate)
    for j in range(long_count):
        length = rng.randint(long_min, long_max)
        out.append(Request(0, horizon_s * (j + 1) / (long_count + 1), length, long_output, True))
    out.sort(key=lambda r: r.arrival_s)
    return [Request(i, r.arrival_s, r.prompt, r.output, r.long) for i, r in enumerate(out)]


@dataclass
class _Seq:
    req: Request
    generated: int = 0
    kv: int = 0  # tokens whose K/V are computed
    blocks: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    preempted: int = 0

    @property
    def target(self) -> int:  # tokens to prefill before it emits (recompute included)
        return self.req.prompt + self.generated

    @property
    def prefilled(self) -> bool:
        return self.generated > 0 and self.kv >= self.target - 1


@dataclass
class ReplicaResult:
    seqs: list[_Seq]
    samples: list[dict]  # {"t", "batch", "kv_pct", "preemptions", "queued"}
    preemptions: int
    steps: int
    max_kv_blocks: int
    kv_blocks: int
    step_ms: list[float] = field(default_factory=list)
    truncated: bool = False  # stopped by max_steps


class SimulationTooLong(RuntimeError):
    """A replica took more steps than its bound: the parameters ask for too much work."""


class _Replica:
    def __init__(self, cfg: FleetConfig, cost: StepCost, requests: list[Request],
                 deadline: float = math.inf):  # fmt: skip
        self.cfg, self.cost, self.deadline = cfg, cost, deadline
        self.pending = deque(requests)
        self.waiting: deque[_Seq] = deque()
        self.running: list[_Seq] = []
        self.all: list[_Seq] = []
        self.free = cfg.kv_blocks
        self.t = 0.0
        self.preemptions = self.steps = self.max_used = 0
        self.samples: list[dict] = []
        self.next_sample = 0.0
        self.step_ms: list[float] = []

    # KV -----------------------------------------------------------------------------
    def _grow(self, s: _Seq, tokens: int) -> bool:
        need = blocks(s.kv + tokens, self.cfg.block_size) - s.blocks
        if need > self.free:
            return False
        self.free -= need
        s.blocks += need
        s.kv += tokens
        self.max_used = max(self.max_used, self.cfg.kv_blocks - self.free)
        return True

    def _release(self, s: _Seq) -> None:
        self.free += s.blocks
        s.blocks = s.kv = 0

    def _preempt_newest(self) -> _Seq:
        victim = self.running.pop()
        self._release(victim)
        victim.preempted += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)
        return victim

    # loop ---------------------------------------------------------------------------
    def run(self) -> ReplicaResult:
        end = 2 * self.cfg.horizon_s
        while self.t < end:
            self._arrive()
            self._sample()
            if not self.waiting and not self.running:
                if not self.pending:
                    break
                self.t = max(self.t, self.pending[0].arrival_s)
                continue
            if self.steps >= self.cfg.max_steps:
                raise SimulationTooLong(
                    f"a replica took more than {self.cfg.max_steps:,} steps; use a shorter "
                    "horizon, a lower rate or fewer replicas' worth of load"
                )
            if self.steps % 256 == 0 and time.perf_counter() > self.deadline:
                raise SimulationTooLong(
                    "the simulation ran past its wall-time limit; use a shorter horizon or "
                    "a lower rate"
                )
            self.steps += 1
            if self.cfg.policy == "chunked":
                self._chunked_step()
            else:
                self._prefill_first_step()
        self._arrive()
        self._sample(final=True)
        return ReplicaResult(self.all, self.samples, self.preemptions, self.steps,
                             self.max_used, self.cfg.kv_blocks, self.step_ms)  # fmt: skip

    def _arrive(self) -> None:
        while self.pending and self.pending[0].arrival_s <= self.t:
            s = _Seq(self.pending.popleft())
            self.all.append(s)
            self.waiting.append(s)

    def _sample(self, final: bool = False) -> None:
        while self.next_sample <= self.t or (final and self.next_sample <= self.cfg.horizon_s):
            used = self.cfg.kv_blocks - self.free
            self.samples.append({
                "t": self.next_sample, "batch": len(self.running),
                "kv_pct": 100 * used / self.cfg.kv_blocks,
                "preemptions": self.preemptions, "queued": len(self.waiting),
            })  # fmt: skip
            self.next_sample += self.cfg.sample_s
            if self.next_sample > end_of(self.cfg):
                break

    def _advance(self, ms: float) -> None:
        self.step_ms.append(ms)
        self.t += ms / 1000

    def _emit(self, s: _Seq) -> None:
        s.generated += 1
        if s.first_token_s is None:
            s.first_token_s = self.t
        if s.generated >= s.req.output:
            s.finished_s = self.t
            self.running.remove(s)
            self._release(s)

    def _decode_kv(self) -> list[_Seq]:
        """Grow each decoding sequence's K/V by one token, oldest first, preempting the
        newest when a block is missing; the sequences that decode this step."""
        out, gone = [], set()  # ids of the sequences preempted during this call
        for s in list(self.running):
            if id(s) in gone or not s.prefilled:
                continue
            while not self._grow(s, 1):
                victim = self._preempt_newest()
                gone.add(id(victim))
                if victim is s:
                    break
            else:
                out.append(s)
        return [s for s in out if id(s) not in gone]

    def _prefill_first_step(self) -> None:
        admitted: list[_Seq] = []
        tokens = 0
        while self.waiting and len(self.running) + len(admitted) < self.cfg.max_seqs:
            s = self.waiting[0]
            if not self._grow(s, s.target):
                break  # the head blocks the queue
            self.waiting.popleft()
            admitted.append(s)
            tokens += s.target
        if admitted:
            for s in admitted:
                s.first_scheduled_s = (
                    s.first_scheduled_s if s.first_scheduled_s is not None else self.t
                )
            self._advance(self.cost.step_ms(tokens, 0, 0))
            self.running += admitted
            for s in admitted:
                self._emit(s)
            return
        decoding = self._decode_kv()
        if not decoding:  # nothing fits and nothing runs: wait for an arrival
            self._advance(self.cost.fixed_ms)
            return
        context = sum(s.kv for s in decoding)
        self._advance(self.cost.step_ms(0, len(decoding), context))
        for s in decoding:
            self._emit(s)

    def _chunked_step(self) -> None:
        budget = self.cfg.chunk_tokens
        decoding = self._decode_kv()
        budget -= len(decoding)
        chunks: list[tuple[_Seq, int]] = []
        # short prefills first, FCFS: partial ones already running, then the queue; a short
        # prompt is chunked too when the budget left is smaller than it
        long = self.cfg.long_prefill_tokens
        for s in [s for s in self.running if not s.prefilled and s.target <= long]:
            n = min(s.target - s.kv, budget)
            if n > 0 and self._grow(s, n):
                chunks.append((s, n))
                budget -= n
        deferred: deque[_Seq] = deque()
        while self.waiting and budget > 0 and len(self.running) < self.cfg.max_seqs:
            s = self.waiting.popleft()
            if s.target > long:  # a long one waits for the leftover budget
                deferred.append(s)
                continue
            n = min(s.target, budget)
            if not self._grow(s, n):
                self.waiting.appendleft(s)
                break
            self.running.append(s)
            chunks.append((s, n))
            budget -= n
        self.waiting.extendleft(reversed(deferred))
        # at most one long prefill in progress; it takes what the others left
        long_running = [s for s in self.running if not s.prefilled and s.target > long]
        if not long_running and self.waiting and self.waiting[0].target > long \
                and len(self.running) < self.cfg.max_seqs:  # fmt: skip
            long_running = [self.waiting.popleft()]
            self.running.append(long_running[0])
        for s in long_running[:1]:
            n = min(budget, s.target - s.kv, self.free * self.cfg.block_size + _slack(s, self.cfg))
            if n > 0 and self._grow(s, n):
                chunks.append((s, n))
                budget -= n
        if not decoding and not chunks:
            self._advance(self.cost.fixed_ms)
            return
        for s, _ in chunks:
            if s.first_scheduled_s is None:
                s.first_scheduled_s = self.t
        context = sum(s.kv for s in decoding)
        self._advance(self.cost.step_ms(sum(n for _, n in chunks), len(decoding), context))
        for s in decoding:
            self._emit(s)
        for s, _ in chunks:
            if s.kv >= s.target and s in self.running:
                self._emit(s)


def _slack(s: _Seq, cfg: FleetConfig) -> int:
    """Tokens that still fit in the sequence's last, partly filled block."""
    return s.blocks * cfg.block_size - s.kv


def end_of(cfg: FleetConfig) -> float:
    return cfg.horizon_s


def route(cfg: FleetConfig, requests: list[Request]) -> tuple[list[list[Request]], list[Request]]:
    """(requests per replica, rejected ones): shorts to a seeded random replica (the same
    draws under every policy), longs round-robin; cap rejects what exceeds the cap; pool
    splits the replicas; a request whose
    K/V can never fit one replica is rejected under every policy."""
    per: list[list[Request]] = [[] for _ in range(cfg.replicas)]
    rejected = []
    pool = cfg.policy == "pool"
    long_set = range(cfg.long_replicas) if pool else range(cfg.replicas)
    short_set = range(cfg.long_replicas, cfg.replicas) if pool else range(cfg.replicas)
    rng, longs_seen = random.Random(cfg.seed), 0
    for r in requests:
        draw = rng.random()  # drawn for every request, so each policy sees the same routes
        too_big = blocks(kv_tokens_held(r.prompt, r.output), cfg.block_size) > cfg.kv_blocks
        if too_big or (cfg.policy == "cap" and r.prompt + r.output > cfg.token_cap):
            rejected.append(r)
            continue
        if r.long:
            per[long_set[longs_seen % len(long_set)]].append(r)
            longs_seen += 1
        else:
            per[short_set[int(draw * len(short_set))]].append(r)
    return per, rejected


@dataclass
class FleetResult:
    cfg: FleetConfig
    replicas: list[ReplicaResult]
    rejected: list[Request]

    def seqs(self, long: bool | None = None) -> list[_Seq]:
        out = [s for r in self.replicas for s in r.seqs]
        return out if long is None else [s for s in out if s.req.long == long]

    @property
    def preemptions(self) -> int:
        return sum(r.preemptions for r in self.replicas)


def simulate(cfg: FleetConfig, cost: StepCost, requests: list[Request],
             deadline: float = math.inf) -> FleetResult:  # fmt: skip
    """Every replica's run; SimulationTooLong past `max_steps` on a replica or past
    `deadline` (a time.perf_counter() value)."""
    if cfg.policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {cfg.policy!r}")
    per, rejected = route(cfg, requests)
    replicas = [_Replica(cfg, cost, reqs, deadline).run() for reqs in per]
    return FleetResult(cfg, replicas, rejected)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def capacity_probe(kv_tokens: int, block_size: int, short_tokens: int,
                   long_tokens: int) -> int:  # fmt: skip
    """How many requests of `short_tokens` K/V one replica's scheduler admits into its empty
    KV budget in one step, behind a request of `long_tokens` K/V when long_tokens > 0:
    counted by running the replica's own admission, not by formula."""
    cfg = FleetConfig(1, kv_tokens, block_size, max_seqs=10**9, policy="fifo",
                      horizon_s=1e9, max_steps=1)  # fmt: skip
    # a huge output keeps everyone resident; the long one is first in the queue
    reqs = [Request(0, 0.0, long_tokens, 10**9, True)] if long_tokens else []
    reqs += [Request(i + 1, 0.0, short_tokens, 10**9, False)
             for i in range(kv_tokens // short_tokens + 2)]  # fmt: skip
    rep = _Replica(cfg, StepCost(1.0, 0.0, 0.0, 0.0), reqs)
    rep._arrive()
    rep._prefill_first_step()
    return sum(1 for s in rep.running if not s.req.long)
