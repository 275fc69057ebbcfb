"""Static vs continuous batching on one seeded mixed workload.

N requests with random prompt and output lengths are queued at once and served with B
slots, first by static batching (a batch of B runs until its longest member finishes) and
then by continuous batching (a finished sequence's slot is refilled at the next step).
The chart is output tokens vs engine steps: its slope divided by B is the slot use.

Both schedules follow from the workload alone, so the predicted curves are exact: static
batching takes Σ over batches of the longest output in the batch steps, continuous batching
takes the makespan of greedy FCFS list scheduling on B slots. Slot use is the bank's
`useful_tokens / (batch * long_tokens)` with long_tokens = steps. The tokens-per-second
ratio matches the step ratio only if a step costs the same however many slots are busy (the
bank's weights-bound GPU); on a CPU a step costs a + b x sequences, so the lab measures
a and b first and predicts tokens per second from them too. At the default width the random
model's weights are 4x the CPU's last-level cache, so a decode step streams them from memory
and b is small beside a: the regime where continuous batching's step ratio is its speed-up.
"""

from __future__ import annotations

import heapq
import math
import random
import statistics
import time
from collections.abc import Iterator

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.common import DTYPE_PARAM, WIDTH_PARAM, sync, width_model
from lab.labs.formulas import slot_utilisation

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"static-predicted": 0, "continuous-predicted": 0}

MODES = ("static", "continuous")
CALIBRATION_STEPS = 9


def workload(params: dict) -> list[tuple[int, int]]:
    """Seeded (prompt_tokens, output_tokens) per request, in arrival (FCFS) order."""
    rng = random.Random(params["seed"])
    return [
        (
            rng.randint(params["prompt_min"], params["prompt_max"]),
            rng.randint(params["output_min"], params["output_max"]),
        )
        for _ in range(params["requests"])
    ]


def static_schedule(outputs: list[int], slots: int) -> list[int]:
    """Sequences emitting a token at each step: batches of `slots` in FCFS order, each
    running as many steps as its longest output (the prefill step emits the first token)."""
    active: list[int] = []
    for start in range(0, len(outputs), slots):
        batch = outputs[start : start + slots]
        active += [sum(o >= t for o in batch) for t in range(1, max(batch) + 1)]
    return active


def continuous_schedule(outputs: list[int], slots: int) -> list[int]:
    """Sequences emitting a token at each step when a freed slot is refilled at the next
    step (greedy FCFS list scheduling on `slots` slots)."""
    free_at = [0] * slots  # step at which each slot is next free
    busy: list[tuple[int, int]] = []  # (start, end) steps of each request
    for out in outputs:
        start = heapq.heappop(free_at)
        heapq.heappush(free_at, start + out)
        busy.append((start, start + out))
    steps = max(free_at)
    active = [0] * steps
    for start, end in busy:
        for t in range(start, end):
            active[t] += 1
    return active


def schedule(mode: str, outputs: list[int], slots: int) -> list[int]:
    return (static_schedule if mode == "static" else continuous_schedule)(outputs, slots)


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default, as vLLM's benchmark reports)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def _engine(model, mode: str, slots: int, p: dict, extra_len: int = 0) -> LLMEngine:
    return LLMEngine(
        model,
        EngineConfig(
            scheduling=mode,
            static_batch_size=slots,
            max_num_seqs=slots,
            # every freed slot's whole prompt fits in the step that admits it: no chunking
            max_num_batched_tokens=slots * (p["prompt_max"] + 1),
            max_model_len=p["prompt_max"] + p["output_max"] + extra_len,
            enable_prefix_caching=False,  # static servers have none; keep the contrast fair
        ),
    )


CALIBRATION_REPEATS = 3  # engines per batch size after a discarded warm-up round


def calibrate_step_s(model, p: dict, vocab: int) -> tuple[float, float, float]:
    """Step cost on this device, in seconds: (a, b, c) for a decode step of n sequences
    costing a + b x n, and c the extra of prefilling a mean-length prompt in a step instead
    of decoding one token. A warm-up round (one engine per batch size) is discarded; then
    CALIBRATION_REPEATS engines per size, the medians of their step times are used (within
    an engine the first decodes warm up too). Not clamped: see step_cost_problem."""
    slots, prompt_len = p["slots"], (p["prompt_min"] + p["prompt_max"]) // 2
    decode: dict[int, list[float]] = {1: [], slots: []}
    prefill: dict[int, list[float]] = {1: [], slots: []}
    for rep in range(1 + CALIBRATION_REPEATS):
        for n in (1, slots):
            engine = _engine(model, "continuous", slots, p, extra_len=CALIBRATION_STEPS)
            gen = torch.Generator().manual_seed(p["seed"] + 1)
            for _ in range(n):
                prompt = torch.randint(3, vocab, (prompt_len,), generator=gen).tolist()
                engine.add_request(prompt, SamplingParams(
                    temperature=0, max_tokens=CALIBRATION_STEPS, ignore_eos=True))  # fmt: skip
            times = []
            for _ in range(CALIBRATION_STEPS):  # one prefill step, then decodes
                sync(model.device)
                start = time.perf_counter()
                engine.step()
                sync(model.device)
                times.append(time.perf_counter() - start)
            if rep:  # round 0 is the warm-up
                prefill[n].append(times[0])
                decode[n].append(statistics.median(times[3:]))  # the first decodes warm up
    d1, dn = statistics.median(decode[1]), statistics.median(decode[slots])
    b = (dn - d1) / max(1, slots - 1)
    a = d1 - b
    c = (statistics.median(prefill[slots]) - dn) / slots
    return a, b, c


def step_cost_problem(a: float, b: float, c: float) -> str:
    """Why the step-cost fit cannot price tokens per second ("" when it can): a fixed cost
    ≤ 0 or a negative cost per sequence or per prefill means the timings were disturbed."""
    if a > 0 and b >= 0 and c >= 0:
        return ""
    return (
        f"not predicted: the fitted step cost (a {a * 1000:.3g} ms, b {b * 1000:.3g} ms "
        f"per sequence, c {c * 1000:.3g} ms per prefill) is not physical, so the timings "
        "were disturbed (another process took the CPU); run again on a quieter machine"
    )


class Batching(Lab):
    slug = "batching"
    title = "Static vs continuous batching: slot use and throughput"
    summary = (
        "The same seeded requests (random prompt and output lengths, all queued at once) are "
        "served with B slots twice. Static batching admits B requests and runs them until "
        "the longest finishes, so finished slots idle; continuous batching refills a slot at "
        "the very next step. The chart counts output tokens against engine steps: the slope "
        "is B × slot use. Predicted curves come from the workload alone and must match "
        "exactly. Tokens per second follow the step ratio only where a step costs the same "
        "whatever the batch holds (a weights-bound GPU); here the lab first measures a step "
        "as a + b × sequences and predicts tokens per second from that. The default model "
        "has random weights and enough layers to be four times this CPU's last-level cache, "
        "so a decode step streams its weights from memory as a real model's does, and a "
        "step of B sequences costs little more than a step of one."
    )
    topics = ("continuous-batching", "prefill-decode")
    params = (
        Param("requests", "Requests", "int", 64, min=2, max=256),
        Param("slots", "Batch slots B", "int", 8, min=1, max=64,
              help="static_batch_size for static, max_num_seqs for continuous"),
        Param("prompt_min", "Shortest prompt", "int", 4, min=1, max=256, unit="tokens"),
        Param("prompt_max", "Longest prompt", "int", 32, min=1, max=256, unit="tokens"),
        Param("output_min", "Shortest output", "int", 4, min=1, max=256, unit="tokens"),
        Param("output_max", "Longest output", "int", 128, min=1, max=256, unit="tokens"),
        Param("seed", "Workload seed", "int", 0, min=0, max=2**31 - 1),
        WIDTH_PARAM,
        DTYPE_PARAM,
    )  # fmt: skip
    series = (
        Series("static", "Static batching (measured)"),
        Series("static-predicted", "Static predicted", "predicted", predicts="static",
               mode="lines", claim="exact", band=BANDS["static-predicted"]),
        Series("continuous", "Continuous batching (measured)"),
        Series("continuous-predicted", "Continuous predicted", "predicted",
               predicts="continuous", mode="lines",
               claim="exact", band=BANDS["continuous-predicted"]),
    )  # fmt: skip
    chart = Chart("engine steps", "output tokens generated")
    time_limit_s = 150

    def check(self, params: dict) -> dict[str, str]:
        errors = {}
        if params["prompt_min"] > params["prompt_max"]:
            errors["prompt_min"] = "must not exceed the longest prompt"
        if params["output_min"] > params["output_max"]:
            errors["output_min"] = "must not exceed the longest output"
        return errors

    def predict(self, params: dict) -> list[Point]:
        outputs = [out for _, out in workload(params)]
        points = []
        for mode in MODES:
            active = schedule(mode, outputs, params["slots"])
            every = _every(len(active))
            points.append(Point(f"{mode}-predicted", 0, 0))
            total = 0
            for step, n in enumerate(active, 1):
                total += n
                if step % every == 0 or step == len(active):
                    points.append(Point(f"{mode}-predicted", step, total))
        return points

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        slots = p["slots"]
        model, _ = width_model(ctx, p["width"], p["dtype"])
        vocab = model.config.vocab_size
        work = workload(p)
        outputs = [out for _, out in work]
        useful = sum(outputs)
        gen = torch.Generator().manual_seed(p["seed"])
        prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n, _ in work]
        a_s, b_s, c_s = calibrate_step_s(model, p, vocab)
        ctx.check_cancel()
        ctx.summary.update(step_cost_a_ms=a_s * 1000, step_cost_b_ms_per_seq=b_s * 1000,
                           prefill_extra_ms_per_request=c_s * 1000)  # fmt: skip
        problem = step_cost_problem(a_s, b_s, c_s)
        ctx.summary["warmup"] = (
            "discarded: one calibration engine per batch size and the first decodes of each; "
            f"step costs are medians over {CALIBRATION_REPEATS} engines. The step counts "
            "below are exact (no timing)")  # fmt: skip
        if problem:
            ctx.summary["step_cost"] = problem
        for mode in MODES:
            active = schedule(mode, outputs, slots)
            predicted_util = slot_utilisation(useful, slots, len(active))
            predicted_s = sum(a_s + b_s * n for n in active) + c_s * len(outputs)
            yield Point(mode, 0, 0, {"seconds": 0.0, "predicted": 0})
            engine = _engine(model, mode, slots, p)
            ids = [
                engine.add_request(
                    prompt, SamplingParams(temperature=0, max_tokens=out, ignore_eos=True)
                )
                for prompt, out in zip(prompts, outputs, strict=True)
            ]
            every = _every(len(active))
            start = time.perf_counter()
            paused = 0.0  # time the consumer held us at a yield (saving the point)
            step = total = last_step = last_total = 0
            while engine.has_unfinished():
                total += len(engine.step())
                sync(ctx.device)
                ctx.check_cancel()
                step += 1
                if step % every and engine.has_unfinished():
                    continue
                slot_use = (total - last_total) / (slots * (step - last_step))
                extra = {"seconds": time.perf_counter() - start,
                         "predicted": sum(active[:step]), "slot_use": slot_use}  # fmt: skip
                last_step, last_total = step, total
                yielded = time.perf_counter()
                yield Point(mode, step, total, extra)
                paused += time.perf_counter() - yielded
            elapsed = time.perf_counter() - start - paused
            self._summarise(ctx, mode, engine, ids, elapsed, step, useful, slots)
            ctx.summary[f"{mode}_predicted_steps"] = len(active)
            ctx.summary[f"{mode}_predicted_slot_use"] = predicted_util
            ctx.summary[f"{mode}_predicted_tok_s"] = (
                useful / predicted_s if predicted_s and not problem else None)  # fmt: skip
        s = ctx.summary
        s["throughput_ratio"] = s["continuous_tok_s"] / s["static_tok_s"]
        # The bank's model: a step costs the same whatever the batch holds.
        s["predicted_ratio_fixed_step"] = (
            s["static_predicted_steps"] / s["continuous_predicted_steps"]
        )
        if s["static_predicted_tok_s"] and s["continuous_predicted_tok_s"]:
            s["predicted_ratio_calibrated"] = (
                s["continuous_predicted_tok_s"] / s["static_predicted_tok_s"]
            )

    @staticmethod
    def _summarise(ctx, mode, engine, ids, elapsed, steps, useful, slots) -> None:
        metrics = [engine.metrics(i) for i in ids]
        produced = sum(m["output_tokens"] for m in metrics)
        ttft = [m["ttft_ms"] for m in metrics]
        e2e = [m["e2e_ms"] for m in metrics]
        ctx.summary.update(
            {
                f"{mode}_tok_s": produced / elapsed,
                f"{mode}_seconds": elapsed,
                f"{mode}_steps": steps,
                f"{mode}_slot_use": slot_utilisation(produced, slots, steps),
                f"{mode}_mean_step_ms": statistics.fmean(s["ms"] for s in engine.step_log),
                f"{mode}_ttft_ms_mean": statistics.fmean(ttft),
                f"{mode}_ttft_ms_p50": percentile(ttft, 50),
                f"{mode}_ttft_ms_p90": percentile(ttft, 90),
                f"{mode}_e2e_ms_mean": statistics.fmean(e2e),
                f"{mode}_e2e_ms_p50": percentile(e2e, 50),
                f"{mode}_e2e_ms_p90": percentile(e2e, 90),
            }
        )
        ctx.summary["output_tokens"] = useful


def _every(steps: int) -> int:
    """Steps between points: about 100 points per curve."""
    return max(1, steps // 100)


LAB = Batching()
