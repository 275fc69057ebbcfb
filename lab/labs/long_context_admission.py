"""Long-context admission: what a few 100k–200k-token requests do to a fleet serving short
chats, under four admission policies side by side.

Step costs are MEASURED on this worker: the bundled model's prefill steps at 4 lengths and
decode steps at 6 (batch, context) points, timed in turns with a discarded warm-up round,
medians of 5, fitted as ms = a + b × prefill tokens + d × decoding sequences + e × context
tokens they attend. The fleet is SIMULATED with those costs (lab/labs/fleet_sim.py): the
tiny model's per-token costs are extrapolated linearly to 200k tokens (its own context is
512, and the attention term that grows with the prompt is left out, so a real 200k prefill
costs more than this), so absolute seconds are this CPU's; the ratios between policies are
what carry over.

Predicted: the KV-capacity arithmetic (exact) — how many short sequences one long request
displaces from a replica, floor(B / s) − floor((B − l) / s) in blocks (B the replica's
budget, s and l a short's and the long's K/V at their largest) — against the simulator's
own admission counting it; and (estimate) the short requests' mean queueing delay under
fifo, from the calibrated costs and the arrival trace, not from the simulation: a short
arriving during a long prefill waits for the rest of it and then for the one prefill step
of the shorts queued behind it; any other short waits the residual of the step in
progress, Σ step² / (2 × time) over its own prefill steps and the decode steps at the
Little's-law batch size. It is refused (not drawn, the reason in the summary) where its
assumptions fail: a replica overloaded, or more shorts queued behind a long prefill than
the max batch or the K/V beside it admit in one step.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.sampler import SamplingParams
from lab.labs import fleet_sim as fs
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.calibration import positive_cost, round_robin
from lab.labs.common import bundled_shape, random_model
from lab.labs.kv_vs_no_cache import fit_slope
from lab.labs.prefix_caching import token_flop_s

BANDS = {"displaced-predicted": 0, "wait-fifo-predicted": 0.25}
PREFILL_LENGTHS = (64, 192, 320, 448)
DECODE_POINTS = ((1, 64), (1, 384), (8, 64), (8, 384), (32, 64), (32, 384))
REPEATS = 5
LONG_PREFILL_TOKENS = 32_768  # chunked: a longer prompt takes what the shorts leave
SAMPLES = 30  # points per policy over the horizon
WALL_LIMIT_S = 40.0  # all four simulations together
MAX_SHORT_TOKENS = 2_000_000  # decoded short tokens a run may simulate (rate × horizon × output)


@dataclass(frozen=True)
class CostFit:
    cost: fs.StepCost
    prefill_ms: list[float]
    decode_ms: list[float]
    worst_residual: float  # largest |fit / timed − 1| over the timed points

    def describe(self, model) -> str:
        c = self.cost
        pf = ", ".join(f"{n}: {m:.2f} ms" for n, m in zip(PREFILL_LENGTHS, self.prefill_ms,
                                                         strict=True))  # fmt: skip
        dc = ", ".join(f"{b}×{n}: {m:.2f} ms" for (b, n), m in zip(DECODE_POINTS, self.decode_ms,
                                                                  strict=True))  # fmt: skip
        return (
            f"step cost MEASURED on this worker's model — prefill (tokens: median) {pf}; "
            f"decode (batch×context: median) {dc}; fitted {c.fixed_ms:.2f} ms per step + "
            f"{c.prefill_token_ms * 1000:.1f} µs per prefill token "
            f"({token_flop_s(model, c.prefill_token_ms) / 1e9:.1f} GFLOP/s) + "
            f"{c.decode_seq_ms * 1000:.1f} µs per decoding sequence + "
            f"{c.context_token_ms * 1e6:.1f} ns per context token; worst fit residual "
            f"{self.worst_residual:.0%}; extrapolated linearly to 200k-token prompts"
        )


def fit_step_cost(prefill_ms: list[float], decode_ms: list[float]) -> tuple[float, ...]:
    """Least squares (a, b, d, e) of ms = a + b × prefill tokens + d × batch + e × batch ×
    context over the timed steps, on relative residuals; without e when it comes out
    negative (no cost per context token to see)."""
    rows = [[1.0, n, 0.0, 0.0] for n in PREFILL_LENGTHS]
    rows += [[1.0, 0.0, b, b * n] for b, n in DECODE_POINTS]
    ms = torch.tensor(prefill_ms + decode_ms, dtype=torch.float64).unsqueeze(1)
    cols = torch.tensor(rows, dtype=torch.float64)
    weight = 1 / ms.clamp(min=1e-6)
    for k in (4, 3):
        coef = torch.linalg.lstsq(cols[:, :k] * weight, ms * weight).solution.squeeze(1).tolist()
        if k == 3 or coef[3] >= 0:
            return coef[0], coef[1], coef[2], coef[3] if k == 4 else 0.0
    raise AssertionError("unreachable")


def checked_cost(model, prefill_ms: list[float], decode_ms: list[float]) -> CostFit:
    """The fitted StepCost, or CalibrationError when a cost is not physical (never clamped)."""
    a, b, d, e = fit_step_cost(prefill_ms, decode_ms)
    # the prefills alone must also grow with their length (a shared intercept could hide it)
    token_flop_s(model, fit_slope([float(n) for n in PREFILL_LENGTHS], prefill_ms))
    positive_cost(a, "fixed cost per step", "the short steps did not take their share of the time")
    positive_cost(d, "cost per decoding sequence", "the larger batches did not take longer")
    token_flop_s(model, b)  # refuses a non-physical per-token cost
    cost = fs.StepCost(a, b, d, e)
    fitted = [cost.step_ms(n, 0, 0) for n in PREFILL_LENGTHS]
    fitted += [cost.step_ms(0, bb, bb * n) for bb, n in DECODE_POINTS]
    worst = max(abs(f / m - 1) for f, m in zip(fitted, prefill_ms + decode_ms, strict=True))
    return CostFit(cost, prefill_ms, decode_ms, worst)


def calibrate(model, ctx: RunContext) -> CostFit:
    """Time prefill steps (batch 1) and decode steps (batch × context) of this model on the
    engine, in turns, one warm-up round discarded, the median of REPEATS kept."""
    gen = torch.Generator().manual_seed(5)
    vocab = model.config.vocab_size

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=gen).tolist()

    fns, logs = [], []
    for n in PREFILL_LENGTHS:
        engine = LLMEngine(model, EngineConfig(max_num_seqs=1, max_model_len=512,
                                               max_num_batched_tokens=512,
                                               enable_prefix_caching=False))  # fmt: skip
        one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)

        def prefill(engine=engine, n=n, one=one):
            engine.add_request(ids(n), one)
            engine.step()

        fns.append(prefill)
        logs.append(engine.step_log)
    for b, n in DECODE_POINTS:
        steps = REPEATS + 4
        engine = LLMEngine(model, EngineConfig(
            max_num_seqs=b, max_model_len=512, max_num_batched_tokens=512,
            num_blocks=b * (-(-(n + steps + 2) // 16)), enable_prefix_caching=False))  # fmt: skip
        params = SamplingParams(temperature=0, max_tokens=steps + 2, ignore_eos=True)
        for _ in range(b):
            engine.add_request(ids(n), params)
        while any(not st.seq.generated_token_ids for st in engine.requests.values()):
            ctx.check_cancel()
            engine.step()  # the prefills; the decode steps are what is timed
        fns.append(engine.step)
        logs.append(engine.step_log)
    ctx.check_cancel()
    round_robin(fns, ctx.device, REPEATS, warmup=1)
    medians = [statistics.median(e["ms"] for e in log[-REPEATS:]) for log in logs]
    return checked_cost(model, medians[: len(PREFILL_LENGTHS)], medians[len(PREFILL_LENGTHS) :])


# predictions -------------------------------------------------------------------------------
def displaced_shorts(kv_tokens: int, block_size: int, short_kv_tokens: int,
                     long_kv_tokens: int) -> int:  # fmt: skip
    """Short sequences one long request displaces from a replica: floor(B / s) −
    floor((B − l) / s) in blocks (≈ l / s), B = the replica's blocks, s and l the blocks
    a short's and the long one's K/V take."""
    budget = kv_tokens // block_size
    s, ln = fs.blocks(short_kv_tokens, block_size), fs.blocks(long_kv_tokens, block_size)
    return budget // s - (budget - ln) // s


def decode_load(cost: fs.StepCost, rate: float, prompt: int, output: int) -> float:
    """Seconds of decode-step time per second that the shorts' per-sequence costs add."""
    per_seq = (cost.decode_seq_ms + cost.context_token_ms * (prompt + output / 2)) / 1000
    return per_seq * rate * (output - 1)


def steady_batch(cost: fs.StepCost, rate: float, prompt: int,
                 output: int) -> tuple[float, float | None]:  # fmt: skip
    """(decoding sequences k, decode step s) at steady state on a prefill-first replica:
    decode steps run in the time the shorts' prefills leave (1 − ρ, ρ = rate × prefill
    step), so k = rate × (output − 1) × s / (1 − ρ) (Little's law) and s = a + per_seq × k;
    (inf, None) when there is no steady state (overload)."""
    spare = 1 - rate * cost.step_ms(prompt, 0, 0) / 1000
    if spare <= 0:
        return math.inf, None
    load = decode_load(cost, rate, prompt, output) / spare
    if load >= 1:
        return math.inf, None
    decode = cost.fixed_ms / 1000 / (1 - load)
    return rate * (output - 1) * decode / spare, decode


def background_wait_s(cost: fs.StepCost, rate: float, prompt: int,
                      output: int) -> float | None:  # fmt: skip
    """Mean queueing delay (s) of a short arriving at a prefill-first replica with no long
    prefill in sight: it waits out the rest of the step in progress, Σ step² / (2 × time)
    over the shorts' own prefill steps (one per arrival) and the decode steps at the
    Little's-law batch size; None when the decode batch has no steady state (overload)."""
    batch, decode = steady_batch(cost, rate, prompt, output)
    prefill = cost.step_ms(prompt, 0, 0) / 1000
    if decode is None:
        return None
    decode_share = (1 - rate * prefill) * (1 - math.exp(-batch))  # some decode runs
    return (rate * prefill**2 + decode_share * decode) / 2


class OutOfDomain(ValueError):
    """The queueing estimate does not apply to these parameters (the message says why)."""


def predicted_waits(cfg: fs.FleetConfig, cost: fs.StepCost,
                    requests: list[fs.Request]) -> dict[int, float]:  # fmt: skip
    """Predicted queueing delay (s) of every short request under a prefill-first policy
    (fifo, cap, pool), from the calibrated costs and the arrival trace, not the simulation:
    a short arriving while a long prompt is prefilled waits for the rest of that prefill
    (one step of a + b × tokens), then for the one prefill step of the shorts queued behind
    it; any other short waits the background residual step (background_wait_s).
    OutOfDomain when a replica is overloaded, or when the shorts queued behind a long
    prefill do not all fit the one catch-up step (the max batch, or the K/V beside the
    long one): they would then wait for sequences to finish, which this does not model."""
    per, _ = fs.route(cfg, requests)
    out: dict[int, float] = {}
    for reqs in per:
        shorts = [r for r in reqs if not r.long]
        if not shorts:
            continue
        rate, prompt, output = len(shorts) / cfg.horizon_s, shorts[0].prompt, shorts[0].output
        background = background_wait_s(cost, rate, prompt, output)
        if background is None:
            raise OutOfDomain(f"a replica gets {rate:.1f} short requests/s, more than it "
                              "serves: no steady state to predict")  # fmt: skip
        running = steady_batch(cost, rate, prompt, output)[0]
        if running > cfg.max_seqs:
            raise OutOfDomain(f"a replica would decode ~{running:.0f} shorts at once, more "
                              f"than the max batch ({cfg.max_seqs})")  # fmt: skip
        short_blocks = fs.blocks(fs.kv_tokens_held(prompt, output), cfg.block_size)
        busy: list[tuple[float, float]] = []  # (start s, end s) of a stall or its catch-up
        for r in (r for r in reqs if r.long):
            start = max(r.arrival_s, busy[-1][1] if busy else 0.0)
            end = start + cost.step_ms(r.prompt, 0, 0) / 1000
            queued = sum(1 for q in shorts if start <= q.arrival_s < end)
            held = fs.blocks(fs.kv_tokens_held(r.prompt, r.output), cfg.block_size)
            if queued + running > cfg.max_seqs or \
                    held + (queued + running) * short_blocks > cfg.kv_blocks:  # fmt: skip
                raise OutOfDomain(
                    f"{queued} shorts queue behind the {r.prompt:,}-token prefill at "
                    f"{r.arrival_s:.0f} s; with ~{running:.0f} running they do not fit one "
                    f"catch-up step (max batch {cfg.max_seqs}, or the K/V beside it)")  # fmt: skip
            catch_up = cost.step_ms(queued * shorts[0].prompt, 0, 0) / 1000
            busy += [(start, end), (end, end + catch_up)]
        for q in shorts:
            inside = next((e for b, e in busy if b <= q.arrival_s < e), None)
            out[q.rid] = background if inside is None else inside - q.arrival_s
    return out


def measured_wait_s(result: fs.FleetResult, until_s: float) -> float | None:
    """Mean simulated queueing delay (arrival to first scheduled) of the shorts arriving
    before `until_s`."""
    waits = [s.first_scheduled_s - s.req.arrival_s for s in result.seqs(long=False)
             if s.req.arrival_s < until_s and s.first_scheduled_s is not None]  # fmt: skip
    return statistics.fmean(waits) if waits else None


def mean_predicted_s(waits: dict[int, float] | None, requests: list[fs.Request],
                     until_s: float) -> float | None:  # fmt: skip
    """Mean predicted queueing delay of the shorts arriving before `until_s`."""
    chosen = [waits[r.rid] for r in requests if r.rid in (waits or {}) and r.arrival_s < until_s]
    return statistics.fmean(chosen) if chosen else None


class LongContextAdmission(Lab):
    slug = "long-context-admission"
    title = "Long-context admission: a few 200k-token requests in a fleet of short chats"
    summary = (
        "A fleet of replicas serves Poisson short chats while a few 100k–200k-token requests "
        "arrive. Step costs are MEASURED first on this worker (the bundled model's prefill "
        "and decode steps, fitted as fixed + per prefill token + per decoding sequence + "
        "per context token); the fleet is SIMULATED with them in a discrete-time simulator "
        "(continuous batching, a KV budget in blocks per replica, preemption by recompute). "
        "The tiny model's per-token costs are extrapolated linearly to 200k tokens (no "
        "attention term: a real 200k prefill costs more), so the seconds are this CPU's; "
        "the ratios between policies are what carry over to GPUs. "
        "Four policies on the same arrival trace: fifo (no admission control: a long "
        "prefill stalls every short behind it), cap (requests over a token cap are refused "
        "with a 4xx, counted), pool (a separate long-context pool of replicas) and chunked "
        "(a per-step token budget: shorts keep decoding while a long prompt is prefilled in "
        "chunks). Drawn: the shorts' TTFT p99 over a rolling window per policy; fifo's mean "
        "queueing delay so far vs its estimate (wait for the rest of the long prefill in "
        "progress, else the rest of the step in progress); at each long arrival, how "
        "many shorts its KV displaces (exact arithmetic vs the simulator's own admission). "
        "Batch size, KV occupancy and preemptions per replica are in each point's details "
        "and the per-policy totals in the summary."
    )
    topics = ("long-context", "capacity-planning", "continuous-batching")
    params = (
        Param("replicas", "Replicas", "int", 4, min=2, max=16),
        Param("short_rate", "Short request rate", "float", 12.0, min=0.5, max=200.0,
              unit="req/s", help="Poisson, across the fleet"),
        Param("short_prompt", "Short prompt", "int", 512, min=16, max=8192, unit="tokens"),
        Param("short_output", "Short output", "int", 128, min=2, max=2048, unit="tokens"),
        Param("long_count", "Long requests", "int", 4, min=0, max=12,
              help="at evenly spaced times over the horizon"),
        Param("long_min", "Long prompt, shortest", "int", 100_000, min=100_000, max=200_000,
              unit="tokens"),
        Param("long_max", "Long prompt, longest", "int", 200_000, min=100_000, max=200_000,
              unit="tokens"),
        Param("long_output", "Long output", "int", 64, min=1, max=1024, unit="tokens"),
        Param("kv_tokens", "KV budget per replica", "int", 262_144, min=16_384,
              max=2_097_152, unit="tokens"),
        Param("block_size", "KV block", "int", 16, min=1, max=256, unit="tokens"),
        Param("max_seqs", "Max batch per replica", "int", 128, min=1, max=512, unit="seqs"),
        Param("token_cap", "cap: token cap per request", "int", 32_768, min=256,
              max=2_097_152, unit="tokens", help="prompt + output; over it: refused (4xx)"),
        Param("long_replicas", "pool: long-context replicas", "int", 1, min=1, max=15),
        Param("chunk_tokens", "chunked: tokens per step", "int", 512, min=64, max=65_536,
              unit="tokens"),
        Param("horizon_s", "Simulated horizon", "float", 60.0, min=5.0, max=600.0, unit="s",
              help="arrivals stop here; the fleet then drains for as long again"),
        Param("seed", "Seed", "int", 0, min=0, max=1_000_000),
    )  # fmt: skip
    series = (
        Series("ttft-p99-fifo", "shorts' TTFT p99, fifo", mode="lines"),
        Series("ttft-p99-cap", "shorts' TTFT p99, cap", mode="lines"),
        Series("ttft-p99-pool", "shorts' TTFT p99, pool", mode="lines"),
        Series("ttft-p99-chunked", "shorts' TTFT p99, chunked", mode="lines"),
        Series("wait-fifo", "mean queueing delay so far, fifo (simulated)", mode="markers"),
        Series("wait-fifo-predicted", "mean queueing delay, fifo, predicted", "predicted",
               predicts="wait-fifo", mode="lines", claim="estimate",
               band=BANDS["wait-fifo-predicted"]),
        Series("displaced", "shorts one long displaces (simulator)", axis="y2",
               mode="markers"),
        Series("displaced-predicted", "shorts displaced, predicted", "predicted",
               predicts="displaced", axis="y2", mode="markers", claim="exact",
               band=BANDS["displaced-predicted"]),
    )  # fmt: skip
    chart = Chart("simulated time (s)", "seconds (log)", y2_title="short sequences",
                  y_type="log")  # fmt: skip
    time_limit_s = 120

    def check(self, params: dict) -> dict[str, str]:
        p, errors = params, {}
        if p["long_max"] < p["long_min"]:
            errors["long_max"] = (f"must be at least the shortest long prompt "
                                  f"({p['long_min']:,} tokens)")  # fmt: skip
        longest = fs.kv_tokens_held(p["long_max"], p["long_output"])
        if (
            p["long_count"]
            and fs.blocks(longest, p["block_size"]) * p["block_size"] > p["kv_tokens"]
        ):
            errors["kv_tokens"] = (
                f"a replica must hold one long request's K/V ({longest:,} tokens at its "
                f"largest) or every long one would be refused; use at least that budget or "
                "shorter long prompts")  # fmt: skip
        short = fs.kv_tokens_held(p["short_prompt"], p["short_output"])
        if fs.blocks(short, p["block_size"]) * p["block_size"] > p["kv_tokens"]:
            errors["short_prompt"] = "a short request's K/V must fit one replica's KV budget"
        if p["long_replicas"] >= p["replicas"]:
            errors["long_replicas"] = (f"must leave at least one replica for short requests "
                                       f"(fewer than {p['replicas']})")  # fmt: skip
        if p["chunk_tokens"] <= p["max_seqs"]:
            errors["chunk_tokens"] = (
                f"must exceed the max batch ({p['max_seqs']}): every decoding sequence takes "
                "one token of the budget"
            )
        work = p["short_rate"] * p["horizon_s"] * p["short_output"]
        if work > MAX_SHORT_TOKENS:
            errors["horizon_s"] = (
                f"rate × horizon × output is {work:,.0f} short tokens to simulate per "
                f"policy, more than {MAX_SHORT_TOKENS:,}: too long a run; use a shorter "
                "horizon, a lower rate or shorter outputs")  # fmt: skip
        return errors

    def predict(self, params: dict) -> list[Point]:
        p = params
        short = fs.kv_tokens_held(p["short_prompt"], p["short_output"])
        return [Point("displaced-predicted", r.arrival_s,
                      displaced_shorts(p["kv_tokens"], p["block_size"], short,
                                       fs.kv_tokens_held(r.prompt, r.output)))
                for r in make_trace(p) if r.long]  # fmt: skip

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        model = random_model(bundled_shape("target"), ctx.device)
        fit = calibrate(model, ctx)
        ctx.summary.update({
            "calibration": fit.describe(model),
            "warmup": "discarded: one round of every calibration step; each timed step is "
                      f"the median of {REPEATS}. The fleet is SIMULATED with these costs.",
            "fixed_ms_per_step": fit.cost.fixed_ms,
            "prefill_ms_per_token": fit.cost.prefill_token_ms,
        })  # fmt: skip
        requests = make_trace(p)
        short = fs.kv_tokens_held(p["short_prompt"], p["short_output"])
        yield from self._displacement(p, requests, short)
        started = time.perf_counter()
        results = {}
        for policy in fs.POLICIES:
            ctx.check_cancel()
            results[policy] = fs.simulate(
                fleet_config(p, policy), fit.cost, requests, started + WALL_LIMIT_S
            )
        ctx.summary["simulation_wall_s"] = time.perf_counter() - started
        yield from self._series(p, requests, results, fit.cost, ctx)

    def _displacement(self, p, requests, short) -> Iterator[Point]:
        alone = fs.capacity_probe(p["kv_tokens"], p["block_size"], short, 0)
        for r in (r for r in requests if r.long):
            held = fs.kv_tokens_held(r.prompt, r.output)
            beside = fs.capacity_probe(p["kv_tokens"], p["block_size"], short, held)
            predicted = displaced_shorts(p["kv_tokens"], p["block_size"], short, held)
            yield Point("displaced", r.arrival_s, alone - beside,
                        {"predicted": predicted, "long_prompt": r.prompt,
                         "shorts_alone": alone, "shorts_beside_it": beside})  # fmt: skip
            yield Point("displaced-predicted", r.arrival_s, predicted)

    def _series(self, p, requests, results, cost, ctx) -> Iterator[Point]:
        waits = {}
        for policy in ("fifo", "cap", "pool"):
            try:
                waits[policy] = predicted_waits(fleet_config(p, policy), cost, requests)
            except OutOfDomain as exc:
                waits[policy] = None
                ctx.summary[f"{policy}_wait_not_predicted"] = f"not predicted: {exc}"
        horizon = p["horizon_s"]
        window = max(horizon / 10, 1.0)
        step = horizon / SAMPLES
        for i in range(1, SAMPLES + 1):
            t = i * step
            for policy, res in results.items():
                ttfts = [
                    s.first_token_s - s.req.arrival_s
                    for s in res.seqs(long=False)
                    if t - window < s.req.arrival_s <= t and s.first_token_s is not None
                ]
                if ttfts:
                    yield Point(f"ttft-p99-{policy}", t, fs.percentile(ttfts, 99),
                                _state(res, t, fs.percentile(ttfts, 50)))  # fmt: skip
            measured = measured_wait_s(results["fifo"], t)
            predicted = mean_predicted_s(waits["fifo"], requests, t)
            if measured is not None and predicted:
                yield Point("wait-fifo", t, measured, {"predicted": predicted})
                yield Point("wait-fifo-predicted", t, predicted)
        for policy, res in results.items():
            self._totals(ctx, p, policy, res, waits.get(policy), requests)

    def _totals(self, ctx, p, policy, res, waits, requests) -> None:
        shorts = res.seqs(long=False)
        ttfts = [s.first_token_s - s.req.arrival_s for s in shorts if s.first_token_s is not None]
        done = [s for s in res.seqs() if s.finished_s is not None]
        ctx.summary.update({
            f"{policy}_short_ttft_p50_ms": fs.percentile(ttfts, 50) * 1000,
            f"{policy}_short_ttft_p99_ms": fs.percentile(ttfts, 99) * 1000,
            f"{policy}_preemptions": res.preemptions,
            f"{policy}_rejected": len(res.rejected),
            f"{policy}_completed": len(done),
            f"{policy}_unfinished": len(res.seqs()) - len(done),
            f"{policy}_max_kv_pct": 100 * max(r.max_kv_blocks / r.kv_blocks for r in res.replicas),
            f"{policy}_mean_wait_ms": (measured_wait_s(res, p["horizon_s"]) or math.nan) * 1000,
        })  # fmt: skip
        if policy != "chunked":  # judged for fifo only; shown for cap and pool
            pred = mean_predicted_s(waits, requests, p["horizon_s"])
            ctx.summary[f"{policy}_mean_wait_ms_predicted"] = (pred or math.nan) * 1000


def _state(res: fs.FleetResult, t: float, p50: float) -> dict:
    """Per-replica state at the sample nearest before t: batch, KV %, preemptions so far."""
    rows = [next((s for s in reversed(r.samples) if s["t"] <= t), r.samples[0] if r.samples else {})
            for r in res.replicas]  # fmt: skip
    return {
        "ttft_p50_s": p50,
        "batch": [row.get("batch", 0) for row in rows],
        "kv_pct": [round(row.get("kv_pct", 0.0)) for row in rows],
        "preemptions": sum(row.get("preemptions", 0) for row in rows),
        "queued": [row.get("queued", 0) for row in rows],
    }


def make_trace(p: dict) -> list[fs.Request]:
    return fs.trace(p["seed"], p["short_rate"], p["horizon_s"], p["short_prompt"],
                    p["short_output"], p["long_count"], p["long_min"], p["long_max"],
                    p["long_output"])  # fmt: skip


def fleet_config(p: dict, policy: str) -> fs.FleetConfig:
    return fs.FleetConfig(
        replicas=p["replicas"], kv_tokens=p["kv_tokens"], block_size=p["block_size"],
        max_seqs=p["max_seqs"], policy=policy, token_cap=p["token_cap"],
        long_replicas=p["long_replicas"], chunk_tokens=p["chunk_tokens"],
        horizon_s=p["horizon_s"], sample_s=p["horizon_s"] / SAMPLES, seed=p["seed"],
        long_prefill_tokens=LONG_PREFILL_TOKENS)  # fmt: skip


LAB = LongContextAdmission()
