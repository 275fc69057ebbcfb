"""Why a KV cache: per-token decode time with the paged cache vs recomputing the prefix.

Two engines on the same random model of the bundled target's shape generate the same long
sequence in lockstep: one with the paged KV cache (each step computes one new token), one
in mode "none" (each step recomputes every token so far). The cached step stays nearly
flat; the uncached one grows with the sequence, so its total time grows quadratically.

Predicted: FLOPs per step (formulas.DECODE_STEP_FLOPS) x seconds per FLOP + a fixed per-step
overhead. Seconds per FLOP is calibrated before the run, as the slope of this model's own
no-cache forward timed at 1/8 of and at the final sequence length (so it includes what
FLOPs miss: softmax, masking, a CPU attention kernel that computes the masked half too),
the lengths timed in turns. The cached step also pays per context token beyond its FLOPs
(reading each earlier token's paged K/V and its bookkeeping): that cost is the slope over
context of paged decode steps timed at the same lengths, less their FLOP time. Each mode's
overhead is its first measured point less its modelled time.

Beside the predictions, each mode has its roofline lower bound from the checked device
constants (lab/labs/calibration.py), as in two-phase: max(weight bytes / the rate a one-row
matrix-vector product streams weights, the step's FLOPs / the matmul rate). At the default
width the random model's weights are 4x the CPU's last-level cache, so the cached step sits
on the weight-stream (memory) bound and the uncached one on the compute bound: the two
regimes the lesson is about. At width 1 (the bundled shape, cache-resident) both are loose.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import torch
from torch import nn

from lab.engine.attention import DenseAttention
from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.calibration import constants_for, fitted_rate, round_robin
from lab.labs.common import DTYPE_PARAM, WIDTH_PARAM, width_model
from lab.labs.formulas import decode_step_flops, step_lower_bound_ms

MODES = ("cached", "none")
MAX_TOKENS = 512  # the bundled model's context
REPEATS = 7  # timings per calibration length (their median is fitted)
# The predictions' bands (lab/labs/verdicts.py): measured / predicted on the median point.
BANDS = {"cached-predicted": 0.25, "none-predicted": 0.25, "cached-roofline": 0.2,
         "none-roofline": 0.2}  # fmt: skip


def step_flops(model: LlamaModel, mode: str, context: float) -> float:
    """FLOPs of the decode step that computes the token at `context` - 1 (with `context`
    tokens attended): one new token when cached, all `context` tokens when not."""
    c = model.config
    lm_head = model.lm_head.weight.numel()
    layer = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, nn.Linear))
    new, pairs = (1, context) if mode == "cached" else (context, context * (context + 1) / 2)
    return decode_step_flops(layer, lm_head, c.num_hidden_layers, c.num_attention_heads,
                             c.head_dim, new, pairs)  # fmt: skip


def fit_slope(xs: list[float], ys: list[float], relative: bool = False) -> float:
    """Least-squares slope of ys over xs (0 when the xs do not vary); `relative`: on
    relative residuals (weights 1/y²), so the short lengths are fitted as closely as the
    long ones whose attention scores spill out of the CPU's caches."""
    w = [1 / y**2 if relative and y else 1.0 for y in ys]
    total = sum(w)
    mx = sum(wi * x for wi, x in zip(w, xs, strict=True)) / total
    my = sum(wi * y for wi, y in zip(w, ys, strict=True)) / total
    sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, xs, strict=True))
    sxy = sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys, strict=True))
    return sxy / sxx if sxx else 0.0


def calibration_lengths(final: int) -> list[int]:
    """Sequence lengths the no-cache forward is timed at: from final/8 to final."""
    return sorted({max(round(final * f), 1) for f in (1 / 8, 3 / 8, 5 / 8, 1)})


def calibrate_steps(model: LlamaModel, device: str,
                    lengths: list[int]) -> tuple[float, float, dict]:  # fmt: skip
    """(seconds per FLOP, ms per context token of a cached step, what was timed).

    At each of `lengths`, this model's no-cache forward (last row's logits) and a cached
    decode step of a paged engine holding that many tokens, all timed in turns
    (calibration.round_robin: a burst of load lands on every length alike, and each cached
    step runs after a big forward, as in the lockstep run), 2 warm-up rounds discarded,
    the median of REPEATS kept. Seconds per FLOP: the slope of the forwards over FLOPs on
    relative residuals, free of the fixed per-call overhead; CalibrationError when it is
    not physical (calibration.fitted_rate). Per context token: the slope of the cached
    steps less their FLOP time (0 when not positive: no such cost to see)."""
    gen = torch.Generator().manual_seed(2)
    vocab = model.config.vocab_size
    fns = []
    params = SamplingParams(max_tokens=REPEATS + 4, temperature=0, ignore_eos=True)
    for n in lengths:
        ids = torch.randint(3, vocab, (n,), generator=gen).to(device)
        pos = torch.arange(n, device=device)

        def forward(ids=ids, pos=pos, n=n):
            with torch.inference_mode():
                return model.logits(model(ids, pos, DenseAttention([n]))[-1:])

        engine = LLMEngine(model, EngineConfig(
            mode="paged", max_num_seqs=1, max_model_len=n + REPEATS + 5,
            max_num_batched_tokens=n, enable_prefix_caching=False))  # fmt: skip
        engine.add_request(ids.tolist(), params)
        engine.step()  # the prefill; the decode steps follow, one per call
        fns += [forward, engine.step]
    times = round_robin(fns, device, REPEATS, warmup=2)
    medians = [statistics.median(t) for t in times]
    forward_s, cached_s = medians[0::2], medians[1::2]
    flops = [step_flops(model, "none", n) for n in lengths]
    flop_s = fitted_rate(fit_slope(flops, forward_s, relative=True),
                         torch.device(device).type, "no-cache forward slope (FLOP/s)")  # fmt: skip
    residual = [(t - step_flops(model, "cached", n) / flop_s) * 1000
                for n, t in zip(lengths, cached_s, strict=True)]  # fmt: skip
    per_ctx_ms = max(fit_slope([float(n) for n in lengths], residual), 0.0)
    detail = {"lengths": lengths, "forward_ms": [round(t * 1000, 3) for t in forward_s],
              "cached_ms": [round(t * 1000, 3) for t in cached_s]}  # fmt: skip
    return 1.0 / flop_s, per_ctx_ms, detail


class KVvsNoCache(Lab):
    slug = "kv-vs-no-cache"
    title = "KV cache vs recompute: per-token decode time over a long generation"
    summary = (
        "The same sequence is generated twice in lockstep on the engine: with the paged KV "
        "cache, each step computes one new token and reads the cached keys and values; with "
        "no cache (mode none), each step recomputes the whole prefix. Cached time per token "
        "stays nearly flat while uncached time grows with the sequence, so the uncached "
        "total grows quadratically. Predicted: FLOPs per step × seconds per FLOP + a fixed "
        "per-step overhead. Seconds per FLOP is calibrated before the run, as the slope of "
        "this model's own no-cache forward timed at 1/8 of and at the final length (so it "
        "also prices softmax and masking, which FLOPs leave out). The cached step also pays "
        "a small cost per context token beyond its FLOPs (reading the paged keys and values), "
        "timed on cached decode steps at the same lengths. Each mode's overhead is its first "
        "point less its modelled time. The shape in between, the nearly flat cached curve "
        "and the totals are predictions. Each mode also has its roofline lower bound from "
        "this machine's checked constants: the time to stream the weights once, or the "
        "step's FLOPs at the matmul rate, whichever is longer. The default model has random "
        "weights and enough layers to be four times this CPU's last-level cache, so the "
        "cached step streams it from memory (it sits on the memory bound) while the "
        "recompute sits on the compute bound, as on a real model."
    )
    topics = ("kv-cache-basics", "prefill-decode", "inference-basics")
    params = (
        Param("prompt_tokens", "Prompt tokens", "int", 16, min=1, max=504, unit="tokens"),
        Param("new_tokens", "Tokens to generate", "int", 160, min=8, max=496, unit="tokens",
              help="the recompute's total grows as the square of this"),
        Param("every", "Point every", "int", 8, min=3, max=64, unit="tokens",
              help="each point is the median step time over this many tokens"),
        WIDTH_PARAM,
        DTYPE_PARAM,
    )  # fmt: skip
    series = (
        Series("cached", "Paged KV cache, measured"),
        Series("cached-predicted", "Paged KV cache, predicted", "predicted",
               predicts="cached", mode="lines", claim="estimate",
               band=BANDS["cached-predicted"]),
        Series("none", "No cache (recompute), measured"),
        Series("none-predicted", "No cache, predicted", "predicted", predicts="none",
               mode="lines", claim="estimate", band=BANDS["none-predicted"]),
        Series("cached-roofline", "Paged KV cache, lower bound (roofline)", "predicted",
               predicts="cached", mode="lines", claim="bound",
               band=BANDS["cached-roofline"], hidden=True, tight=True),
        Series("none-roofline", "No cache, lower bound (roofline)", "predicted",
               predicts="none", mode="lines", claim="bound",
               band=BANDS["none-roofline"], hidden=True, tight=True),
    )  # fmt: skip
    chart = Chart("sequence length at the step (tokens)", "ms per generated token")
    time_limit_s = 180

    def loose_cause(self, series: str) -> str:
        return ("at width 1 the bundled model fits in the CPU's last-level cache, so a cached "
                "step is per-step overhead (Python, kernel calls, the paged K/V reads), not "
                "the weight stream the bound counts; the default width 4 model, 4x the cache, "
                "tightens it")  # fmt: skip

    def miss_cause(self, series: str) -> str:
        if series.endswith("roofline"):
            return (
                "the device constants were measured slower than this run's steps (under "
                "load, see their line), or the bound counts work the step skips"
            )
        return ""

    def check(self, params: dict) -> dict[str, str]:
        if params["prompt_tokens"] + params["new_tokens"] > MAX_TOKENS:
            return {"new_tokens": f"prompt + generated tokens must be at most {MAX_TOKENS} "
                                  "(the bundled model's context); generate fewer"}  # fmt: skip
        if 2 * params["every"] > params["new_tokens"] - 1:
            return {"every": "must be at most half the decode steps (tokens to generate less "
                             "one): the first window of steps is a discarded warm-up"}  # fmt: skip
        return {}

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        model, weight_bytes = width_model(ctx, p["width"], p["dtype"])
        constants = constants_for(ctx.device, model.dtype, weight_bytes,
                                  path=ctx.calibration_path)  # fmt: skip
        ctx.summary["constants"] = constants.describe(uses=("matvec", "flop"))
        final = p["prompt_tokens"] + p["new_tokens"] - 1  # context of the last decode step
        s_per_flop, per_ctx_ms, timed = calibrate_steps(
            model, ctx.device, calibration_lengths(final)
        )
        per_context = {"cached": per_ctx_ms, "none": 0.0}

        def cost_ms(mode: str, x: float) -> float:  # the step's modelled cost less overhead
            return step_flops(model, mode, x) * s_per_flop * 1000 + per_context[mode] * x

        ctx.summary["calibration"] = (
            f"timed in turns at {timed['lengths']} tokens (median of {REPEATS} after 2 "
            f"warm-up rounds): no-cache forward {timed['forward_ms']} ms, fitted slope "
            f"{1e-9 / s_per_flop:.2f} GFLOP/s; cached decode step {timed['cached_ms']} ms, "
            + (f"{per_ctx_ms * 1000:.2f} µs per context token beyond its FLOPs"
               if per_ctx_ms else "no cost per context token beyond its FLOPs"))  # fmt: skip
        ctx.summary["warmup"] = (
            f"discarded, not plotted: 2 warm-up rounds of the calibration, each engine's "
            f"prefill and its first {p['every']} decode steps"
        )
        ctx.check_cancel()

        def bound_ms(mode: str, x: float) -> float:
            return step_lower_bound_ms(weight_bytes, constants.matvec_bytes_s,
                                       step_flops(model, mode, x), constants.flop_s)  # fmt: skip

        for mode in MODES:
            for x in self._bins(p):
                yield Point(f"{mode}-roofline", x, bound_ms(mode, x))
        prompt = torch.randint(3, model.config.vocab_size, (p["prompt_tokens"],),
                               generator=torch.Generator().manual_seed(0)).tolist()  # fmt: skip
        engines, seqs = {}, {}
        params = SamplingParams(max_tokens=p["new_tokens"], temperature=0, ignore_eos=True)
        for mode in MODES:
            engines[mode] = LLMEngine(model, EngineConfig(
                mode="paged" if mode == "cached" else "none", max_num_seqs=1,
                max_model_len=p["prompt_tokens"] + p["new_tokens"],
                max_num_batched_tokens=max(p["prompt_tokens"], 1),
                enable_prefix_caching=False))  # fmt: skip
            seqs[mode] = engines[mode].requests[engines[mode].add_request(prompt, params)].seq

        window: dict[str, list[tuple[int, float]]] = {m: [] for m in MODES}
        overhead_ms: dict[str, float] = {}
        warming = True
        while engines["cached"].has_unfinished() or engines["none"].has_unfinished():
            for mode in MODES:
                engine = engines[mode]
                if not engine.has_unfinished():
                    continue
                prefill = not seqs[mode].is_prefill_done
                engine.step()
                if not prefill:  # decode steps only: the prompt's prefill is the TTFT
                    # tokens whose KV exists now: all but the token just sampled (a
                    # finished sequence's num_computed_tokens is reset, so not that)
                    context = seqs[mode].num_tokens - 1
                    window[mode].append((context, engine.step_log[-1]["ms"]))
            ctx.check_cancel()
            if len(window["none"]) < p["every"]:
                continue
            if warming:  # the first window is warm-up (allocations, caches): not plotted
                window, warming = {m: [] for m in MODES}, False
                continue
            for mode in MODES:
                xs, ms = zip(*window[mode], strict=True)
                x, y = statistics.median(xs), statistics.median(ms)
                lo, hi = min(ms), max(ms)
                flop_ms = cost_ms(mode, x)
                if mode not in overhead_ms:  # the only fitted number: first point's overhead
                    overhead_ms[mode] = max(y - flop_ms, 0.0)
                    if y < flop_ms:  # said in the summary, never silently floored
                        ctx.summary[f"{mode}_overhead_note"] = (
                            f"the first point ran {flop_ms - y:.3g} ms under its FLOP cost "
                            "alone, so the fixed overhead is taken as 0 (the fitted rate is "
                            "pessimistic at this length)"
                        )
                    yield from self._predicted(ctx, mode, overhead_ms[mode], cost_ms)
                extra = {
                    "predicted": overhead_ms[mode] + flop_ms,
                    "roofline_ms": bound_ms(mode, x),
                    "gflop_per_step": step_flops(model, mode, x) / 1e9,
                    "lo": lo, "hi": hi, "repeats": len(ms),
                }  # fmt: skip
                yield Point(mode, x, y, extra)
                window[mode] = []
        self._summarise(ctx, model, engines, overhead_ms, s_per_flop, cost_ms)

    def _bins(self, params: dict) -> list[float]:
        """x of every point: the median sequence length of each window of decode steps."""
        first = params["prompt_tokens"] + 1  # after the first decode step
        decode_steps = params["new_tokens"] - 1
        every = params["every"]
        return [
            statistics.median(range(first + i, first + i + every))
            for i in range(every, decode_steps - every + 1, every)  # after the warm-up window
        ]

    def _predicted(self, ctx, mode, overhead_ms, cost_ms) -> Iterator[Point]:
        for x in self._bins(ctx.params):
            ms = overhead_ms + cost_ms(mode, x)
            yield Point(f"{mode}-predicted", x, ms)

    def _summarise(self, ctx, model, engines, overhead_ms, s_per_flop, cost_ms) -> None:
        p = ctx.params
        first = p["prompt_tokens"] + 1
        contexts = range(first, p["prompt_tokens"] + p["new_tokens"])  # decode steps
        for mode in MODES:
            log = engines[mode].step_log
            predicted = sum(overhead_ms[mode] + cost_ms(mode, x) for x in contexts)
            ctx.summary[f"{mode}_decode_total_ms"] = sum(s["ms"] for s in log[1:])
            ctx.summary[f"{mode}_decode_total_ms_predicted"] = predicted
            ctx.summary[f"{mode}_overhead_ms_per_step"] = overhead_ms[mode]
            ctx.summary[f"{mode}_ms_last_token"] = log[-1]["ms"]
            ctx.summary[f"{mode}_total_gflop"] = sum(step_flops(model, mode, x)
                                                     for x in contexts) / 1e9  # fmt: skip
        s = ctx.summary
        s["total_time_ratio_none_over_cached"] = s["none_decode_total_ms"] / s[
            "cached_decode_total_ms"]  # fmt: skip
        s["total_time_ratio_predicted"] = s["none_decode_total_ms_predicted"] / s[
            "cached_decode_total_ms_predicted"]  # fmt: skip
        s["total_flop_ratio_none_over_cached"] = s["none_total_gflop"] / s["cached_total_gflop"]
        s["calibrated_gflop_s"] = 1e-9 / s_per_flop


LAB = KVvsNoCache()
