"""Speculative decoding with the bundled draft and target, greedy: acceptance, tokens per
target step and wall-clock speedup vs k, at batch 1 and at larger batches.

The draft proposes k tokens, the target checks them in one pass and keeps the longest
matching prefix plus one token of its own, so the output equals the target's own greedy
output (checked here on every prompt). The prediction needs two measured numbers, both
taken first: alpha, the chance the target accepts a draft token (measured at k = 1, where
every proposal is a first one), c, what a draft step costs in target steps (both models
decoding alone on the same prompts), and v_k, what the target's verify pass over k + 1
tokens costs in target steps (timed alone on a cached context: 1 if the pass is memory-bound,
more on a CPU whose ridge is a few tokens). Then tokens per step = (1 - alpha^(k+1)) /
(1 - alpha) and speedup = that / (k c + v_k).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams
from lab.engine.speculative import SpeculativeDecoder, forward_rows
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.common import bundled_model, bundled_shape, heldout_windows
from lab.labs.formulas import spec_speedup, spec_tokens_per_step

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"tokens-per-step-predicted": 0.25, "speedup-predicted": 0.25}

REPEATS = 3  # timed pairs per speedup point (median plotted, min … max drawn)
BATCHES = (4, 16)  # the batch sweep; batch 1 is the main curve
BATCH_KS = (1, 2, 4, 8)  # k values of the batch sweep (fewer: a batch of 16 is slow on CPU)


@dataclass
class Measured:
    """Totals over a set of prompts for one decoder setting."""

    tokens: list[list[int]]
    wall_s: float
    proposed: int
    accepted: int
    emitted: int
    seq_rounds: int

    @property
    def alpha(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def tokens_per_step(self) -> float:
        return self.emitted / self.seq_rounds


def decode(
    target: LlamaModel, draft: LlamaModel, k: int, groups: list[list[list[int]]], new: int
) -> Measured:
    """Run each group of prompts as one batch, one group after another."""
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    max_len = max(len(p) for g in groups for p in g) + new
    decoder = SpeculativeDecoder(target, draft, k=k, max_model_len=max_len,
                                 max_batch=max(map(len, groups)))  # fmt: skip
    out = Measured([], 0.0, 0, 0, 0, 0)
    for group in groups:
        r = decoder.generate(group, params)
        out.tokens += r.tokens
        out.wall_s += r.wall_s
        out.proposed += r.proposed
        out.accepted += r.accepted
        out.emitted += r.emitted
        out.seq_rounds += r.seq_rounds
    return out


class SpeculativeDecoding(Lab):
    slug = "speculative-decoding"
    title = "Speculative decoding: acceptance, tokens per step, speedup vs k and batch"
    summary = (
        "The bundled small draft proposes k tokens; the bundled target verifies them in one "
        "pass (greedy, so the output is exactly the target's). For k = 1…K: acceptance alpha, "
        "tokens gained per target pass and the wall-clock speedup over the target decoding "
        "alone on the same held-out code prompts. Predicted: (1 − α^(k+1)) / (1 − α) tokens "
        "per step with α measured at k = 1, and speedup = that / (k·c + 1) with c, the "
        "draft's step cost in target steps, measured by timing each model alone. Then the "
        "same at batch 4 and 16: a busier target has less idle compute to verify with, so "
        "the speedup shrinks. Look for the predicted curve running above the measured one "
        "at large k (later draft tokens are accepted less often than the first)."
    )
    topics = ("speculative-decoding", "latency-levers")
    params = (
        Param("max_k", "Largest k", "int", 8, min=1, max=12, unit="draft tokens"),
        Param("prompts", "Prompts (batch 1)", "int", 4, min=1, max=16,
              help="held-out code windows, decoded one after another"),
        Param("prompt_tokens", "Prompt length", "int", 64, min=4, max=448, unit="tokens"),
        Param("new_tokens", "New tokens", "int", 32, min=4, max=256, unit="tokens"),
        Param("max_batch", "Batch sweep up to", "choice", "16", choices=("1", "4", "16"),
              help="also run batches of 4 and 16 prompts at k = 1, 2, 4, 8 (1: skip)"),
    )  # fmt: skip
    series = (
        Series("tokens-per-step", "tokens per target step (batch 1)"),
        Series("tokens-per-step-predicted", "tokens per step, predicted", "predicted",
               predicts="tokens-per-step", mode="lines",
               claim="estimate", band=BANDS["tokens-per-step-predicted"]),
        Series("speedup", "speedup, batch 1", axis="y2"),
        Series("speedup-predicted", "speedup batch 1, predicted", "predicted",
               predicts="speedup", axis="y2", mode="lines",
               claim="estimate", band=BANDS["speedup-predicted"]),
        *(Series(f"speedup-b{b}", f"speedup, batch {b}", axis="y2") for b in BATCHES),
    )  # fmt: skip
    chart = Chart("k (draft tokens per round)", "tokens per target step",
                  y2_title="speedup vs target alone (×)")  # fmt: skip
    time_limit_s = 150

    def check(self, params: dict) -> dict[str, str]:
        limit = bundled_shape("target")["max_position_embeddings"]
        if params["prompt_tokens"] + params["new_tokens"] > limit:
            room = limit - params["prompt_tokens"]
            return {
                "new_tokens": f"prompt + new tokens must fit the model's {limit}-token "
                f"context: at most {room} with this prompt"
            }
        return {}

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        target = bundled_model("target", device=ctx.device)
        draft = bundled_model("draft", device=ctx.device)
        batches = [b for b in BATCHES if b <= int(p["max_batch"])]
        windows = heldout_windows(max(p["prompts"], *batches, 1), p["prompt_tokens"])
        prompts = [w.tolist() for w in windows]
        single = [[q] for q in prompts[: p["prompts"]]]
        new, ks = p["new_tokens"], range(1, p["max_k"] + 1)

        decode(target, draft, 1, single[:1], min(new, 8))  # warm-up, discarded
        decode(draft, draft, 0, single[:1], min(new, 8))
        ctx.check_cancel()
        cost_ratio, ratios = step_cost_ratio(target, draft, single, new)
        verify = verify_costs(target, draft, prompts[0], list(ks))
        ctx.summary["verify_cost"] = {k: round(v, 3) for k, v in verify.items()}
        ctx.summary.update({
            "cost_ratio": cost_ratio, "cost_ratio_spread": f"{min(ratios):.3f} … "
            f"{max(ratios):.3f} over {len(ratios)} timed pairs",
            "warmup": "discarded, not plotted: a short speculative and a draft-only decode "
                      f"before any timing; each speedup is the median of {REPEATS} "
                      "back-to-back (target alone, speculative) pairs, min … max drawn",
        })  # fmt: skip

        alpha1 = None
        mismatches = 0
        for k in ks:
            ctx.check_cancel()
            base_k, m, speedup, spread = repeated(target, draft, k, single, new)
            mismatches += sum(a != b for a, b in zip(m.tokens, base_k.tokens, strict=True))
            if alpha1 is None:  # k = 1: the prediction's alpha; draw the predicted curves
                alpha1 = m.alpha
                ctx.summary["alpha"] = alpha1
                for j in ks:
                    yield Point("tokens-per-step-predicted", j, spec_tokens_per_step(alpha1, j))
                    yield Point("speedup-predicted", j,
                                spec_speedup(alpha1, j, cost_ratio, verify[j]))  # fmt: skip
            yield Point("tokens-per-step", k, m.tokens_per_step, {
                "predicted": spec_tokens_per_step(alpha1, k), "alpha": m.alpha,
                "formula_with_this_alpha": spec_tokens_per_step(m.alpha, k),
                "accepted": m.accepted, "proposed": m.proposed,
                "identical_to_target": m.tokens == base_k.tokens,
            })  # fmt: skip
            yield Point("speedup", k, speedup, {
                "predicted": spec_speedup(alpha1, k, cost_ratio, verify[k]),
                "cost_ratio": cost_ratio, "verify_cost": verify[k],
                **spread,
                "tokens_per_s": m.emitted / m.wall_s,
                "target_only_tokens_per_s": base_k.emitted / base_k.wall_s,
            })  # fmt: skip
            ctx.summary[f"k{k}_speedup"] = speedup
            ctx.summary[f"k{k}_alpha"] = m.alpha
            ctx.summary[f"k{k}_tokens_per_step"] = m.tokens_per_step
        ctx.summary["mismatched_sequences"] = mismatches
        _best(ctx.summary, 1, {k: ctx.summary[f"k{k}_speedup"] for k in ks})

        for b in batches:
            speedups = {}
            for k in [k for k in BATCH_KS if k <= p["max_k"]]:
                ctx.check_cancel()
                base_b, m, speedups[k], spread = repeated(target, draft, k, [prompts[:b]], new)
                yield Point(f"speedup-b{b}", k, speedups[k], {
                    **spread,
                    "alpha": m.alpha, "tokens_per_step": m.tokens_per_step,
                    "tokens_per_s": m.emitted / m.wall_s,
                    "target_only_tokens_per_s": base_b.emitted / base_b.wall_s,
                })  # fmt: skip
            _best(ctx.summary, b, speedups)


def paired(
    target: LlamaModel, draft: LlamaModel, k: int, groups: list[list[list[int]]], new: int
) -> tuple[Measured, Measured]:
    """(target alone, speculative with k), measured back to back so that a change in the
    machine's load between settings hits both alike."""
    return decode(target, draft, 0, groups, new), decode(target, draft, k, groups, new)


def repeated(
    target: LlamaModel, draft: LlamaModel, k: int, groups: list[list[list[int]]], new: int
) -> tuple[Measured, Measured, float, dict]:
    """REPEATS paired runs: (the last pair, median speedup, its spread for the chart)."""
    speedups = []
    for _ in range(REPEATS):
        base, spec = paired(target, draft, k, groups, new)
        speedups.append(base.wall_s / spec.wall_s)
    spread = {"lo": min(speedups), "hi": max(speedups), "repeats": len(speedups)}
    return base, spec, statistics.median(speedups), spread


def step_cost_ratio(
    target: LlamaModel, draft: LlamaModel, groups: list[list[list[int]]], new: int
) -> tuple[float, list[float]]:
    """c: seconds of the draft decoding alone / the target decoding alone, same prompts;
    the median over at least REPEATS pairs (prompts taken again when fewer), each pair timed
    back to back (the load on a shared machine moves). Returns (median, every ratio)."""
    picks = [groups[i % len(groups)] for i in range(max(REPEATS, len(groups)))]
    ratios = [
        decode(draft, draft, 0, [g], new).wall_s / decode(target, draft, 0, [g], new).wall_s
        for g in picks
    ]
    return statistics.median(ratios), ratios


def verify_costs(
    target: LlamaModel, draft: LlamaModel, prompt: list[int], ks: list[int], repeats: int = 7
) -> dict[int, float]:
    """v_k: the target's pass over k + 1 new tokens (logits for all of them, as a verify)
    over its pass over 1 token, on the same cached prompt, timed alone in turns (each the
    median of `repeats`). 1.0 would mean the pass is memory-bound and extra tokens ride free."""
    top = max(ks) + 1
    decoder = SpeculativeDecoder(target, draft, k=max(ks), max_model_len=len(prompt) + top + 1,
                                 max_batch=1)  # fmt: skip
    kv, cached = decoder.target_pool.kv, len(prompt)
    sizes = [1, *(k + 1 for k in ks)]
    tokens = prompt[:top]

    def run(n: int) -> float:
        start = time.perf_counter()
        forward_rows(target, kv, [0], [cached], [tokens[:n]], [n])
        return time.perf_counter() - start

    with torch.inference_mode():
        forward_rows(target, kv, [0], [0], [prompt], [1])  # the cached context
        for n in sizes:  # warm-up per shape
            run(n)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(repeats):
            for n in sizes:
                times[n].append(run(n))
    one = statistics.median(times[1])
    return {k: statistics.median(times[k + 1]) / one for k in ks}


def _best(summary: dict, batch: int, speedups: dict[int, float]) -> None:
    k = max(speedups, key=speedups.get)
    summary[f"b{batch}_best_k"], summary[f"b{batch}_best_speedup"] = k, speedups[k]


LAB = SpeculativeDecoding()
