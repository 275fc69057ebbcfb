"""Two phases of inference: prefill is compute-bound, decode is memory-bound.

Both run on the engine with the bundled target's shape (random weights), and both are put
on one x axis: the tokens one forward step computes. A prefill step computes the whole
prompt (x = prompt length; its step time is the TTFT); a decode step computes one token per
running sequence (x = batch size; its step time is the TPOT). The device constants
(lab/labs/calibration.py: GEMM FLOP/s, read bandwidth on a buffer as large as the weights,
both checked against physical bounds) give a lower bound per step: max(weight bytes /
bandwidth, the step's FLOPs / FLOP/s), the step's FLOPs counted as in kv-vs-no-cache (the
LM head only for sampled rows, attention pairs included).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator

import torch
from torch import nn

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.calibration import constants_for
from lab.labs.common import (
    DTYPE_PARAM,
    WIDTH_PARAM,
    matmul_params,
    width_model,
)
from lab.labs.formulas import decode_step_flops, step_lower_bound_ms

DECODE_PROMPT_TOKENS = 16  # short prompts: decode attention stays a small part of a step
# The bounds' noise allowance (lab/labs/verdicts.py): measured may not be faster than the
# bound by more than this share; more is a bug in the bound.
BANDS = {"prefill-roofline": 0.2, "decode-roofline": 0.2}


def step_flops(model: LlamaModel, tokens: int, pairs: float, sequences: int) -> float:
    """FLOPs of a step computing `tokens` tokens over `pairs` (query, key) pairs and
    sampling one row for each of `sequences` sequences."""
    c = model.config
    layer = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, nn.Linear))
    lm_head = model.lm_head.weight.numel()
    return decode_step_flops(layer, lm_head, c.num_hidden_layers, c.num_attention_heads,
                             c.head_dim, tokens, pairs, sequences)  # fmt: skip


def prefill_flops(model: LlamaModel, prompt: int) -> float:
    return step_flops(model, prompt, prompt * (prompt + 1) / 2, 1)


def decode_flops(model: LlamaModel, batch: int, context: float) -> float:
    return step_flops(model, batch, batch * context, batch)


def doubling(start: int, stop: int) -> list[int]:
    """start, 2·start, 4·start, ... below stop, then stop itself."""
    values, v = [], start
    while v < stop:
        values.append(v)
        v *= 2
    return [*values, stop]


class TwoPhase(Lab):
    slug = "two-phase"
    title = "Prefill vs decode: TTFT grows with the prompt, TPOT barely with the batch"
    summary = (
        "One forward step of the engine, timed two ways: a prefill of P prompt tokens (its "
        "time is the TTFT) and a decode step of a batch of B sequences, one token each (its "
        "time is the TPOT). Both sit on one axis, tokens computed in the step. The lower "
        "bound drawn first comes from this machine's checked constants, a matmul (FLOP/s) "
        "and a one-row matrix-vector product over weight-sized matrices (bytes/s, the rate "
        "this CPU's matmul kernel streams weights from memory): a step costs at least the "
        "time to stream the weights once, and at least its FLOPs (2 per weight per token, the LM "
        "head once per sampled row, attention per pair) at the matmul rate. Warm-up steps "
        "are discarded; each point is the median of the repeats. The default model has "
        "random weights and enough layers to be four times this CPU's last-level cache, so "
        "decode streams it from memory as a real model's does. Look for the flat "
        "memory-bound floor at small token counts, the compute-bound slope beyond the ridge "
        "(a CPU's ridge is a few tokens), and, at width 1, how far above the roofline a "
        "cache-resident model's per-step overhead keeps decode."
    )
    topics = ("prefill-decode", "inference-basics", "latency-levers")
    params = (
        Param("max_prompt_tokens", "Longest prompt", "int", 512, min=16, max=1024,
              unit="tokens", help="prefill points at 16, 32, 64, ... up to this"),
        Param("max_batch", "Largest decode batch", "int", 64, min=1, max=128,
              unit="sequences", help="decode points at 1, 2, 4, ... up to this"),
        WIDTH_PARAM,
        DTYPE_PARAM,
        Param("repeats", "Timings per point", "int", 5, min=3, max=10,
              help="prefills per prompt length and decode steps per batch, after a "
                   "discarded warm-up; the median is plotted, the spread drawn"),
    )  # fmt: skip
    series = (
        Series("prefill", "Prefill step (TTFT), measured"),
        Series("prefill-roofline", "Prefill lower bound (roofline)", "predicted",
               predicts="prefill", mode="lines", claim="bound",
               band=BANDS["prefill-roofline"], tight=True),
        Series("decode", "Decode step (TPOT), measured"),
        Series("decode-roofline", "Decode lower bound (roofline)", "predicted",
               predicts="decode", mode="lines", claim="bound",
               band=BANDS["decode-roofline"], tight=True),
    )  # fmt: skip
    chart = Chart("tokens computed in one step (prompt length or batch size)",
                  "ms per step", x_type="log", y_type="log")  # fmt: skip
    time_limit_s = 180

    def miss_cause(self, series: str) -> str:
        return ("the device constants were measured slower than this run's steps (under "
                "load, see their line), or the bound counts work the step skips")  # fmt: skip

    def loose_cause(self, series: str) -> str:
        return ("at width below 4 the weights fit in the CPU's last-level cache, so each step "
                "is per-step overhead (Python, kernel launches), not the weight stream the "
                "bound counts; the default width 4 model, 4x the cache, tightens it. Past the "
                "ridge the bound uses the n=512 GEMM rate, which skinny decode GEMMs do not "
                "reach")  # fmt: skip

    def check(self, params: dict) -> dict[str, str]:
        # prefill work grows as width² x tokens: keep wide models to prompts that run in seconds
        if params["width"] >= 3 and params["max_prompt_tokens"] > 512:
            reason = "must be at most 512 when width is 3 or more (a wide model's long prefill"
            return {"max_prompt_tokens": f"{reason} takes too long)"}
        return {}

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        model, weight_bytes = width_model(ctx, p["width"], p["dtype"])
        dtype, dtype_bytes = model.dtype, model.dtype.itemsize
        n_params = matmul_params(model)
        constants = constants_for(ctx.device, dtype, weight_bytes, path=ctx.calibration_path)
        # the weights stream through a matmul kernel, at the rate a one-row product reaches
        # (measured beside the plain read rate, which a single core's kernels fall short of)
        flop_s, bandwidth = constants.flop_s, constants.matvec_bytes_s
        ctx.summary["constants"] = constants.describe(uses=("matvec", "flop"))
        ctx.summary["warmup"] = (
            "discarded, not plotted: one prefill per prompt length and the first decode step "
            f"of each batch; each point is the median of {p['repeats']} timings, min … max "
            "drawn")  # fmt: skip
        ctx.check_cancel()
        context = DECODE_PROMPT_TOKENS + 1  # the middle decode step's attended keys, about

        def prefill_bound(tokens: int) -> float:
            return step_lower_bound_ms(weight_bytes, bandwidth, prefill_flops(model, tokens),
                                       flop_s)  # fmt: skip

        def decode_bound(batch: int) -> float:
            return step_lower_bound_ms(weight_bytes, bandwidth,
                                       decode_flops(model, batch, context), flop_s)  # fmt: skip

        prompts = doubling(16, p["max_prompt_tokens"])
        batches = doubling(1, p["max_batch"])
        for x in prompts:
            yield Point("prefill-roofline", x, prefill_bound(x))
        for x in batches:
            yield Point("decode-roofline", x, decode_bound(x))
        ridge = flop_s / bandwidth  # FLOP per byte where compute time = memory time
        ctx.summary.update({
            "matmul_gflop_s": flop_s / 1e9, "weight_stream_gb_s": bandwidth / 1e9,
            "read_bandwidth_gb_s": constants.bandwidth_bytes_s / 1e9,
            "matmul_params": n_params,
            "ridge_flop_per_byte": ridge,
            "ridge_tokens_per_step": math.ceil(ridge * dtype_bytes / 2),
        })  # fmt: skip

        prefill: dict[int, float] = {}
        for x, point in self._prefill(ctx, model, prompts, prefill_bound):
            prefill[x] = point.y
            yield point
        decode: dict[int, float] = {}
        for x, point in self._decode(ctx, model, batches, decode_bound):
            decode[x] = point.y
            yield point
        self._summarise(ctx, prompts, batches, prefill, decode, prefill_bound, decode_bound)

    def _prefill(self, ctx, model, prompts, roofline) -> Iterator[tuple[int, Point]]:
        """One request per prompt length; the step that prefills it also samples its first
        token, so the step time is the TTFT less queueing."""
        longest = prompts[-1]
        engine = LLMEngine(model, EngineConfig(
            max_model_len=longest + 1, max_num_seqs=1, max_num_batched_tokens=longest,
            enable_prefix_caching=False))  # fmt: skip
        gen = torch.Generator().manual_seed(0)
        vocab = model.config.vocab_size
        params = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)

        def one(n: int) -> tuple[float, float]:
            rid = engine.add_request(torch.randint(3, vocab, (n,), generator=gen).tolist(),
                                     params)  # fmt: skip
            engine.step()
            return engine.step_log[-1]["ms"], engine.metrics(rid)["ttft_ms"]

        for n in prompts:
            one(n)  # warm-up per shape, discarded: first-call allocations and kernel choice
            runs = []
            for _ in range(ctx.params["repeats"]):
                runs.append(one(n))
                ctx.check_cancel()
            ms, ttft = (statistics.median(r[i] for r in runs) for i in (0, 1))
            steps = [r[0] for r in runs]
            extra = {"predicted": roofline(n), "ttft_ms": ttft, "tokens_per_s": n / ms * 1000,
                     "roofline_fraction": roofline(n) / ms, "lo": min(steps),
                     "hi": max(steps), "repeats": len(steps)}  # fmt: skip
            yield n, Point("prefill", n, ms, extra)

    def _decode(self, ctx, model, batches, roofline) -> Iterator[tuple[int, Point]]:
        """B requests prefilled in one step, then `repeats` decode steps of all B together;
        the plotted value is the median step, TPOT (vLLM's definition) goes in extra."""
        repeats = ctx.params["repeats"]
        weight_bytes = matmul_params(model) * model.dtype.itemsize
        gen = torch.Generator().manual_seed(1)
        vocab = model.config.vocab_size
        params = SamplingParams(max_tokens=repeats + 2, temperature=0, ignore_eos=True)
        for b in batches:
            engine = LLMEngine(model, EngineConfig(
                max_model_len=DECODE_PROMPT_TOKENS + repeats + 3, max_num_seqs=b,
                max_num_batched_tokens=b * DECODE_PROMPT_TOKENS,
                enable_prefix_caching=False))  # fmt: skip
            ids = [
                engine.add_request(
                    torch.randint(3, vocab, (DECODE_PROMPT_TOKENS,), generator=gen).tolist(),
                    params,
                )
                for _ in range(b)
            ]
            while engine.has_unfinished():
                engine.step()
                ctx.check_cancel()
            steps = [
                s["ms"] for s in engine.step_log if s["prefill_tokens"] == 0 and s["num_seqs"] == b
            ][1:]  # 1st: warm-up
            ms = statistics.median(steps)
            tpot = [engine.metrics(i)["tpot_ms"] for i in ids]
            extra = {"predicted": roofline(b), "tpot_ms": statistics.fmean(t for t in tpot if t),
                     "tokens_per_s": b / ms * 1000, "roofline_fraction": roofline(b) / ms,
                     "weight_gb_s_achieved": weight_bytes / ms / 1e6,
                     "lo": min(steps), "hi": max(steps), "repeats": len(steps)}  # fmt: skip
            yield b, Point("decode", b, ms, extra)

    def _summarise(self, ctx, prompts, batches, prefill, decode, prefill_bound,
                   decode_bound) -> None:  # fmt: skip
        longest, widest = prompts[-1], batches[-1]
        ctx.summary.update({
            "ttft_ms_longest_prompt": prefill[longest],
            "prefill_tokens_per_s": longest / prefill[longest] * 1000,
            "prefill_roofline_fraction": prefill_bound(longest) / prefill[longest],
            "tpot_ms_batch_1": decode[1],
            "tpot_ms_largest_batch": decode[widest],
            "decode_tokens_per_s_largest_batch": widest / decode[widest] * 1000,
            "decode_roofline_fraction_batch_1": decode_bound(1) / decode[1],
            "decode_weight_gb_s_achieved_batch_1": ctx.summary["weight_mb"] / decode[1],
            "tpot_growth_1_to_largest_batch": decode[widest] / decode[1],
            "ttft_growth_16_to_longest_prompt": prefill[longest] / prefill[prompts[0]],
        })  # fmt: skip
        shared = [x for x in batches if x in prefill]
        if shared:  # same tokens per step both ways: decode pays per-sequence attention
            x = shared[-1]
            ctx.summary[f"decode_over_prefill_at_{x}_tokens"] = decode[x] / prefill[x]


LAB = TwoPhase()
