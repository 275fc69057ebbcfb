"""Section (e) of `python -m bench.engine`: speculative decoding against its cost model.

Per k, at batch 1 on the bundled target + draft, greedy: the measured speedup over plain
decoding of the same target (the decoder with k=0, and the engine; the tokens of every run
are asserted identical to the engine's), the measured acceptance rate α and tokens per
target pass τ, and two predictions
(lab/engine/speculative_cost.py, derivation in docs/ENGINE.md, "Speculative decoding"):

    i.i.d.:      (1 - α^(k+1)) / ((1 - α)(k·c + 1))
    cost model:  τ / (k·c + v)

c = a draft decode step / a target decode step and v = the target's verify pass over k + 1
tokens / a target decode step, both timed in this run with the decoder's own forward pass
(`forward_rows`) at the runs' mid context, interleaved with the runs. The last column is measured vs cost model in %.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch

from bench.engine import Bench, greedy, heldout_tokens, make_engine, table
from lab.engine.engine import LLMEngine
from lab.engine.model import LlamaModel
from lab.engine.speculative import SpeculativeDecoder, forward_rows
from lab.engine.speculative_cost import (
    expected_tokens_per_step,
    percent_difference,
    speedup_from_tokens_per_step,
    speedup_iid,
)
from lab.labs.common import WEIGHTS, bundled_model, sync

PROMPT_TOKENS = 64
TOLERANCE_PCT = 15  # the target: measured within 15% of the cost model


def engine_run(engine: LLMEngine, groups: list[list[list[int]]], new: int) -> tuple[float, list]:
    """(seconds, tokens per prompt): plain greedy decoding on the engine, group by group.
    The engine is built beforehand (as the decoder's caches are) without prefix caching, so
    a repeat recomputes its prompts as the decoder does."""
    sync(engine.model.device)
    started, tokens = time.perf_counter(), []
    for group in groups:
        tokens.extend(engine.generate(group, greedy(new)))
    sync(engine.model.device)
    return time.perf_counter() - started, tokens


def spec_run(decoder: SpeculativeDecoder, groups: list[list[list[int]]], new: int):
    """(seconds, counters summed over the groups, tokens per prompt)."""
    counts = dict.fromkeys(("accepted", "proposed", "emitted", "seq_rounds"), 0)
    wall, tokens = 0.0, []
    for group in groups:
        result = decoder.generate(group, greedy(new))
        wall += result.wall_s
        tokens.extend(result.tokens)
        for key in counts:
            counts[key] += getattr(result, key)
    return wall, counts, tokens


def best_of(runs: dict[str, Callable[[], tuple]], repeats: int) -> dict[str, tuple]:
    """Each run `repeats` times after one warm-up, interleaved (load changes hit all alike);
    keeps each one's fastest result (noise on a shared machine only ever adds time)."""
    best: dict[str, tuple] = {}
    for attempt in range(repeats + 1):
        for name, run in runs.items():
            result = run()
            if attempt and (name not in best or result[0] < best[name][0]):
                best[name] = result
    return best


def step_timer(model: LlamaModel, context: list[int], n: int, passes: int = 10):
    """A run for best_of: (mean seconds of one pass over n new tokens, through the decoder's
    own forward pass, after `context` tokens are cached)."""
    kv = SpeculativeDecoder(model, model, k=0, max_batch=1).target_pool.kv
    with torch.inference_mode():
        forward_rows(model, kv, [0], [0], [context], [1])

    def run() -> tuple[float]:
        new = context[:n]  # any n tokens, written (over and over) at len(context)..
        with torch.inference_mode():
            sync(model.device)
            started = time.perf_counter()
            for _ in range(passes):
                logits = forward_rows(model, kv, [0], [len(context)], [new], [n])
                logits.argmax(-1).tolist()  # the host sync every real step has
            sync(model.device)
        return ((time.perf_counter() - started) / passes,)

    return run


def _check_identical(name: str, tokens: list, reference: list) -> None:
    if tokens != reference:
        raise AssertionError(
            f"{name} produced tokens that differ from plain greedy decoding on the engine; "
            "speculative decoding must be lossless (check forward_rows and the rollback)."
        )


def section_e(b: Bench) -> str:
    if not (b.bundled and (WEIGHTS / "draft" / "model.safetensors").exists()):
        return "skipped: no bundled target + draft weights (random models agree on nothing)"
    text = heldout_tokens(4 * 1024)
    if text is None:
        return "skipped: held-out corpus text unavailable (manifest, tokenizer or stdlib)"
    draft = bundled_model("draft", torch.float32, b.device)
    # fp32 whatever --dtype says: the check below wants greedy tokens identical to plain
    # decoding, and bf16 rounds differently in the decoder's slot attention and the engine's
    # paged attention, so near-ties flip (an arithmetic difference, not a lossy decoder).
    target = b.target if b.dtype == torch.float32 else copy.deepcopy(b.target).float()
    new, ks, repeats = (64, (1, 2, 3, 4), 3) if b.quick else (128, (1, 2, 3, 4, 5, 6), 5)
    prompts = [text[i * 1024 : i * 1024 + PROMPT_TOKENS].tolist() for i in range(4)]
    context = prompts[0] + text[PROMPT_TOKENS : PROMPT_TOKENS + new // 2].tolist()  # mid-run
    parts = []
    for bs in (1, 4):
        groups = [prompts[i : i + bs] for i in range(0, 4, bs)]
        engine = make_engine(target, enable_prefix_caching=False)
        runs = {"engine": lambda e=engine, g=groups: engine_run(e, g, new)}
        for k in (0, *ks):
            decoder = SpeculativeDecoder(target, draft, k=k, max_batch=bs)
            runs[f"k={k}"] = lambda d=decoder, g=groups: spec_run(d, g, new)
        if bs == 1:  # step costs, timed between the runs they explain
            runs["draft 1"] = step_timer(draft, context, 1)
            for n in (1, *(k + 1 for k in ks)):
                runs[f"target {n}"] = step_timer(target, context, n)
        best = best_of(runs, repeats)
        for name, result in best.items():
            if not name.startswith(("draft", "target")):
                _check_identical(f"speculative {name}, bs={bs}", result[-1], best["engine"][1])
        parts.append((bs, best))
    costs = parts[0][1]
    draft_ms = costs["draft 1"][0] * 1000
    target_ms = {n: costs[f"target {n}"][0] * 1000 for n in (1, *(k + 1 for k in ks))}
    return _report(parts, ks, draft_ms, target_ms, new, repeats)


def _report(parts, ks, draft_ms: float, target_ms: dict[int, float], new: int, repeats: int):
    c = draft_ms / target_ms[1]
    head = ["bs", "k", "α", "τ tokens/pass", "τ i.i.d. α", "τ i.i.d. α(k=1)", "v",
            "speedup measured", "i.i.d. (1-α^(k+1))/((1-α)(kc+1))", "same, α(k=1)",
            "cost model τ/(kc+v)", "measured vs model", "speedup vs engine"]  # fmt: skip
    first = parts[0][1]["k=1"][1]
    alpha1 = first["accepted"] / first["proposed"]  # per-position acceptance, if independent
    rows, misses, best_rows = [], [], []
    for bs, best in parts:
        engine_s = best["engine"][0]
        rows.append([bs, "engine (plain)", *[""] * 10, 1.0])
        for k in (0, *ks):
            wall, n, _ = best[f"k={k}"]
            alpha = n["accepted"] / n["proposed"] if k else 0.0
            tau = n["emitted"] / n["seq_rounds"]
            measured, vs_engine = best["k=0"][0] / wall, engine_s / wall
            row = [bs, k, f"{alpha:.3f}" if k else "", f"{tau:.2f}",
                   f"{expected_tokens_per_step(alpha, k):.2f}",
                   f"{expected_tokens_per_step(alpha1, k):.2f}"]  # fmt: skip
            if bs > 1:  # c and v were timed at batch 1
                rows.append([*row, "", measured, "", "", "", "", vs_engine])
                continue
            v = target_ms[k + 1] / target_ms[1]
            model = speedup_from_tokens_per_step(tau, k, c, v)
            diff = percent_difference(measured, model)
            if k and abs(diff) > TOLERANCE_PCT:
                misses.append(f"k={k} ({diff:+.0f}%)")
            rows.append([*row, f"{v:.2f}", measured, f"{speedup_iid(alpha, k, c):.2f}",
                         f"{speedup_iid(alpha1, k, c):.2f}", f"{model:.2f}",
                         f"{diff:+.1f}%", vs_engine])  # fmt: skip
            if k:
                best_rows.append((vs_engine, measured, k))
    vs_engine, measured, k_best = max(best_rows)
    verdict = (f"all k within {TOLERANCE_PCT}% of the cost model" if not misses
               else f"outside {TOLERANCE_PCT}%: {', '.join(misses)}")  # fmt: skip
    widths = ", ".join(f"{n} tokens {ms:.2f} ms" for n, ms in sorted(target_ms.items()))
    engine_ms = parts[0][1]["engine"][0] / (4 * new) * 1000
    return (
        f"{table(head, rows)}\n\nBest at bs=1: k={k_best}, **{vs_engine:.2f}x** the engine's "
        f"plain decoding (target >= 1.5x), {measured:.2f}x the decoder's k=0; {verdict}. "
        f"Step costs (the decoder's forward pass at context {PROMPT_TOKENS + new // 2}, best "
        f"of {repeats} means of 10, between the runs): draft 1 token {draft_ms:.2f} ms, "
        f"target {widths}; c = {c:.3f}; the engine's plain decoding took {engine_ms:.2f} ms "
        f"per token (prefill included). Tokens identical to the engine's greedy output in "
        f"every run (asserted). 4 prompts of {PROMPT_TOKENS} held-out tokens, {new} new tokens "
        f"each, bs=1 one after another, bs=4 together; greedy, fp32; wall clock includes the "
        f"prefill; best of {repeats}, interleaved. 'speedup measured' = time of plain decoding "
        "with the decoder's own machinery (k=0: the target alone, one token per pass) / time "
        "with k drafts, the machinery c and v are timed with; 'speedup vs engine' divides the "
        "engine's time instead. α = accepted / proposed, so τ = 1 + k·α (less in the last, "
        "shorter rounds); the i.i.d. formula wants the chance that a draft is accepted given "
        "the ones before it were, which is α only at k=1: the α(k=1) columns use that."
    )
