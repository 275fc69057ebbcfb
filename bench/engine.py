"""Our engine vs Hugging Face `transformers` on the same weights: `python -m bench.engine`.

    python -m bench.engine [--quick] [--sections abcdefg] [--device cpu] [--threads 2]
                           [--dtype bf16|fp32] [--compile]

One markdown table per section, both sides measured in one process on this machine:
(a) bs=1 decode ms/token, (b) mixed-workload throughput (continuous vs static batching),
(c) KV bytes allocated vs used at peak (paged vs contiguous), (d) multi-turn TTFT with and
without prefix caching, (e) speculative decoding, (f) weight-only quantisation, (g) roofline
of a ~110M model against the measured copy bandwidth and a bare chain of `F.linear` calls
over the same weights. --dtype defaults to bf16 where the CPU (or GPU) has native bf16, else
fp32; HF runs in the same dtype. A section whose module or weights are
missing prints "skipped: <reason>". Metrics as in vLLM's serving benchmark: TTFT to the first
token, TPOT = (E2E - TTFT) / (output tokens - 1); tokens are counted from the engine.
Latencies are best-of-N (noise on a shared machine only ever adds time). --threads 2 is the
house setting; when other processes load the 2 cores, each 2-thread OpenMP region can stall for
milliseconds, so compare with --threads 1 (docs/BENCHMARKS.md, "Engine").
"""

from __future__ import annotations

import argparse
import copy
import datetime
import importlib.util
import math
import os
import platform
import random
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from lab.engine.config import EngineConfig
from lab.engine.dtypes import DTYPES
from lab.engine.engine import LLMEngine
from lab.engine.model import LlamaModel, weight_bytes
from lab.engine.sampler import SamplingParams
from lab.labs.common import (
    WEIGHTS,
    bundled_model,
    heldout_ids,
    perplexity,
    random_model,
    timed,
    window_nll,
)

_LLAMA = {"model_type": "llama", "rms_norm_eps": 1e-6, "bos_token_id": 0, "eos_token_id": 1}
ROOFLINE_SHAPE = {**_LLAMA, "vocab_size": 32000, "hidden_size": 768, "intermediate_size": 2048,
                  "num_hidden_layers": 12, "num_attention_heads": 12, "num_key_value_heads": 4,
                  "max_position_embeddings": 2048}  # fmt: skip  # ~125M params, untied
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
PAD_ID = 2  # <|pad|> of the bundled tokenizer; any id works for random weights


@dataclass
class Bench:
    """What every section shares: the target (ours and HF's copy of it) and the settings."""

    quick: bool
    device: str
    dtype: torch.dtype
    target: LlamaModel
    hf: object  # transformers LlamaForCausalLM with the target's weights
    bundled: bool  # the bundled trained target (else a random model of its shape)
    paged_run: tuple | None = None  # (jobs, engine config, engine) from section (b)
    compile: bool = False  # also time the engine with EngineConfig(compile=True) in (a)

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES[self.dtype]

    @property
    def label(self) -> str:
        return "bundled target" if self.bundled else "random model of the target's shape"


# ---------------------------------------------------------------- helpers


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table; floats are printed with 2 decimals."""
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows])


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)


def random_ids(rng: random.Random, n: int, vocab: int) -> list[int]:
    """n token ids above the special tokens (0..2)."""
    return [rng.randrange(3, vocab) for _ in range(n)]


def machine() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")
    import transformers

    return (
        f"Machine: {cpu}; {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; "
        f"torch {torch.__version__}, transformers {transformers.__version__}, Python "
        f"{platform.python_version()}; load average {os.getloadavg()[0]:.1f} (1 min)"
    )


# ---------------------------------------------------------------- models


def hf_twin(model: LlamaModel):
    """transformers' LlamaForCausalLM holding exactly `model`'s weights (same dtype/device)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    dtype = str(model.dtype).removeprefix("torch.")
    hf = LlamaForCausalLM(LlamaConfig(**model.config.to_hf(dtype=dtype)))
    hf.load_state_dict(model.state_dict(), strict=True)
    return hf.to(model.device, model.dtype).requires_grad_(False).eval()


def make_engine(model: LlamaModel, **overrides) -> LLMEngine:
    settings = {"max_model_len": 512, "max_num_seqs": 4, "max_num_batched_tokens": 512}
    return LLMEngine(model, EngineConfig(**{**settings, **overrides}))


# ---------------------------------------------------------------- measurements


def default_dtype(device: str) -> tuple[str, str]:
    """(dtype, why): the engine's measured choice for the bundled target's shape on this
    machine (lab.engine.dtypes, cached in var/engine_dtype.json), not a guess from CPU flags:
    a CPU with avx512_bf16 can still run this model's steps faster in fp32."""
    from lab.engine import dtypes
    from lab.labs.common import bundled_shape

    var = os.environ.get("VAR_DIR") or Path(__file__).resolve().parents[1] / "var"
    choice = dtypes.choose(device, shape=bundled_shape("target"), path=dtypes.cache_path(var))
    return choice.dtype, choice.describe()


def ours_decode_ms(
    model: LlamaModel, prompt: list[int], new: int, repeats: int = 3, **config
) -> float:
    """Best TPOT (ms) of single greedy requests on the paged engine, after a warm-up."""
    engine = make_engine(model, max_num_seqs=1, **config)
    engine.generate([prompt[::-1]], greedy(8))  # warm-up (reversed: no prefix hit)
    tpots = []
    for _ in range(repeats):
        rid = engine.add_request(prompt, greedy(new))
        while engine.has_unfinished():
            engine.step()
        tpots.append(engine.metrics(rid)["tpot_ms"])
    return min(tpots)


def hf_generate(hf, batch: list[list[int]], new: int) -> None:
    """Greedy HF generate with its KV cache: left-padded batch, exactly `new` tokens each."""
    width = max(map(len, batch))
    ids = torch.tensor([[PAD_ID] * (width - len(p)) + p for p in batch], device=hf.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=hf.device)
    with torch.inference_mode():
        hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                    min_new_tokens=new, do_sample=False, pad_token_id=PAD_ID)  # fmt: skip


def hf_seconds(hf, batch: list[list[int]], new: int, repeats: int) -> float:
    return min(timed(lambda: hf_generate(hf, batch, new), hf.device)[0] for _ in range(repeats))


def hf_decode_ms(hf, prompt: list[int], new: int, repeats: int = 3) -> float:
    """Decode ms/token = (t(new tokens) - t(1 token)) / (new - 1), best of N, after a warm-up."""
    hf_generate(hf, [prompt], 8)
    one, full = hf_seconds(hf, [prompt], 1, repeats), hf_seconds(hf, [prompt], new, repeats)
    return (full - one) / (new - 1) * 1000


def copy_bandwidth_gbps(device: str, megabytes: int = 512, repeats: int = 5) -> float:
    """Best-of-N large tensor copy, counting bytes read + bytes written (STREAM convention)."""
    src = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    best = min(timed(lambda: dst.copy_(src), device)[0] for _ in range(repeats))
    return 2 * src.numel() * 4 / best / 1e9


# ---------------------------------------------------------------- (a) bs=1 decode


def section_a(b: Bench) -> str:
    prompt = random_ids(random.Random(1), 32, b.target.config.vocab_size)
    ours, theirs = [], []
    for _ in range(3):  # interleaved, so load changes hit both alike
        ours.append(ours_decode_ms(b.target, prompt, 128, repeats=2))
        theirs.append(hf_decode_ms(b.hf, prompt, 128, repeats=2))
    ours, theirs = min(ours), min(theirs)
    rows = [["ours (paged)", ours, 1000 / ours], ["HF generate (KV cache)", theirs, 1000 / theirs]]
    note = ""
    if b.compile:
        engine = make_engine(b.target, max_num_seqs=1, compile=True)
        started = time.perf_counter()
        engine.generate([prompt[::-1]], greedy(8))  # compiles (prefill stays eager)
        compile_s = time.perf_counter() - started
        compiled = ours_decode_ms(b.target, prompt, 128, repeats=3, compile=True)
        rows.insert(1, ["ours (paged) + torch.compile", compiled, 1000 / compiled])
        note = (
            f" torch.compile: {compile_s:.1f} s to compile (first decode steps), then "
            f"{compiled / theirs:.2f}x HF."
        )
    return (
        f"{table(['engine', 'ms/token', 'tok/s'], rows)}\n\nours/HF = **{ours / theirs:.2f}x** "
        f"the time per token (target <= 0.8x). {b.label}, {b.dtype_name}, 32-token prompt, "
        "128 new tokens, greedy; best of 3x2 runs, ours and HF interleaved (ours: TPOT; HF: "
        f"(t(128) - t(1)) / 127).{note}"
    )


# ---------------------------------------------------------------- (b) + (c) mixed workload


def workload(n: int, vocab: int, max_len: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """n (prompt ids, output length) pairs; both lengths uniform in 16..256, sum <= max_len."""
    rng, jobs = random.Random(seed), []
    for _ in range(n):
        prompt_len, out_len = rng.randint(16, 256), rng.randint(16, 256)
        jobs.append((random_ids(rng, prompt_len, vocab), min(out_len, max_len - prompt_len)))
    return jobs


def run_ours(model: LlamaModel, jobs, **config) -> tuple[float, int, LLMEngine]:
    """(seconds, output tokens counted from the engine, engine) for the whole workload."""
    make_engine(model, **config).generate([p for p, _ in jobs[:4]], greedy(4))  # warm-up
    engine, outs = make_engine(model, **config), []
    prompts, params = [p for p, _ in jobs], [greedy(o) for _, o in jobs]
    wall, _ = timed(lambda: outs.extend(engine.generate(prompts, params)), model.device)
    return wall, sum(map(len, outs)), engine


def static_batches(jobs, batch_size: int = 8) -> list[list[tuple[list[int], int]]]:
    return [jobs[i : i + batch_size] for i in range(0, len(jobs), batch_size)]


def run_hf_static(hf, jobs) -> float:
    """Seconds for HF static batching: arrival-order batches of 8, each run to its longest."""
    hf_generate(hf, [p for p, _ in jobs[:2]], 4)  # warm-up
    return sum(hf_seconds(hf, [p for p, _ in c], max(o for _, o in c), 1)
               for c in static_batches(jobs))  # fmt: skip


def section_b(b: Bench) -> str:
    n, config = (32 if b.quick else 64), {"max_num_seqs": 16, "max_num_batched_tokens": 512}
    vocab, max_len = b.target.config.vocab_size, min(512, b.target.config.max_position_embeddings)
    jobs = workload(n, vocab, max_len)
    useful = sum(o for _, o in jobs)
    ours_s, ours_tokens, engine = run_ours(b.target, jobs, **config)
    b.paged_run = (jobs, config, engine)
    hf_s = run_hf_static(b.hf, jobs)
    hf_computed = sum(len(c) * max(o for _, o in c) for c in static_batches(jobs))
    steps = len(engine.step_log)
    mean_seqs = sum(s["num_seqs"] for s in engine.step_log) / steps
    rows = [["ours: continuous batching, paged", ours_tokens, ours_tokens, ours_s,
             ours_tokens / ours_s, f"{steps} steps, mean {mean_seqs:.1f} seqs/step"],
            ["HF: static batches of 8, left-padded", useful, hf_computed, hf_s, useful / hf_s,
             "each batch runs to its longest output"]]  # fmt: skip
    ratio = (ours_tokens / ours_s) / (useful / hf_s)
    hf_step_ms = hf_s * 1000 / sum(max(o for _, o in c) for c in static_batches(jobs))
    head = ["engine", "output tokens", "tokens computed", "s", "output tok/s", "notes"]
    return (
        f"{table(head, rows)}\n\nours/HF throughput = **{ratio:.2f}x** (target >= 3x). "
        f"Cost of a step: ours (decode-only steps) {decode_step_costs(engine)}; HF "
        f"{hf_step_ms:.1f} ms per step of 8 rows (prefill included). "
        f"{n} requests, prompt and output lengths uniform in 16..256 (seed 0, random ids), "
        f"greedy, ignore_eos; {b.label}, {b.dtype_name}; ours: max_num_seqs=16, "
        f"max_num_batched_tokens=512, chunked prefill; one run each."
    )


def decode_step_costs(engine: LLMEngine) -> str:
    """Median ms of decode-only steps at the smallest, middle and largest batch seen."""
    by_seqs: dict[int, list[float]] = {}
    for step in engine.step_log:
        if step["prefill_tokens"] == 0:
            by_seqs.setdefault(step["num_seqs"], []).append(step["ms"])
    sizes = sorted(by_seqs)
    picks = sorted({sizes[0], sizes[len(sizes) // 2], sizes[-1]}) if sizes else []
    return ", ".join(f"{statistics.median(by_seqs[n]):.1f} ms at {n} seqs" for n in picks)


def peak_usage(engine: LLMEngine) -> tuple[int, int]:
    """(allocated, used) KV bytes at the step with the most used bytes."""
    peak = max(engine.step_log, key=lambda s: s["kv_used_bytes"] or 0)
    return peak["kv_allocated_bytes"], peak["kv_used_bytes"]


def hf_static_peak(jobs, bytes_per_token: int) -> tuple[int, int]:
    """HF's DynamicCache at the end of the fullest static batch, computed from shapes:
    allocated = batch x (longest prompt + longest output); used = each row's real tokens."""
    sizes = [(len(c) * (max(len(p) for p, _ in c) + max(o for _, o in c)),
              sum(len(p) + o for p, o in c)) for c in static_batches(jobs)]  # fmt: skip
    alloc, used = max(sizes, key=lambda pair: pair[1])
    return alloc * bytes_per_token, used * bytes_per_token


def section_c(b: Bench) -> str:
    if b.paged_run is None:
        return "skipped: needs section (b)'s paged run (run sections b and c together)"
    jobs, config, paged = b.paged_run
    _, _, contiguous = run_ours(b.target, jobs, mode="contiguous", **config)
    per_token = paged.kv_bytes_per_token()
    rows = [[label, f"{alloc / 2**20:.2f}", f"{used / 2**20:.2f}", alloc / used]
            for label, (alloc, used) in [
                ("ours: paged (16-token blocks)", peak_usage(paged)),
                ("ours: contiguous (512 tokens reserved per sequence)", peak_usage(contiguous)),
                ("HF: static batch of 8, DynamicCache (computed)", hf_static_peak(jobs, per_token)),
            ]]  # fmt: skip
    head = ["cache", "allocated MiB", "used MiB", "allocated/used"]
    return (
        f"{table(head, rows)}\n\nAt the step of peak used KV bytes in (b)'s workload "
        f"({len(jobs)} requests, {per_token} B/token in {b.dtype_name}). Target: paged <= 1.04."
    )


# ---------------------------------------------------------------- (d) multi-turn chat


def chat_ttfts(model: LlamaModel, seed: int, caching: bool) -> list[tuple[float, int, int]]:
    """(TTFT ms, prompt tokens, prefix-hit tokens) per turn of a 5-turn conversation on a
    fresh engine: each prompt = the conversation so far + 40 new tokens; 32-token answers."""
    engine = make_engine(model, enable_prefix_caching=caching)
    rng, history, turns = random.Random(seed), [], []
    for _ in range(5):
        prompt = history + random_ids(rng, 40, model.config.vocab_size)
        hits_before = engine.manager.stats()["prefix_hit_tokens"] if caching else 0
        rid = engine.add_request(prompt, greedy(32))
        while engine.has_unfinished():
            engine.step()
        hits = engine.manager.stats()["prefix_hit_tokens"] - hits_before if caching else 0
        turns.append((engine.metrics(rid)["ttft_ms"], len(prompt), hits))
        history = prompt + engine.requests[rid].seq.generated_token_ids
    return turns


def section_d(b: Bench) -> str:
    repeats = 3 if b.quick else 5
    chat_ttfts(b.target, 99, True)  # warm-up
    runs = {c: [] for c in (False, True)}
    for seed in range(repeats):  # interleaved, so load changes hit both alike
        for caching in runs:
            runs[caching].append(chat_ttfts(b.target, seed, caching))
    rows = []
    for turn in range(5):
        off, on = (min(run[turn][0] for run in runs[c]) for c in (False, True))
        _, prompt_len, hits = runs[True][0][turn]
        prompt = random_ids(random.Random(turn), prompt_len, b.target.config.vocab_size)
        hf_ms = hf_seconds(b.hf, [prompt], 1, repeats) * 1000
        rows.append([turn + 1, prompt_len, hits, off, on, on / off, hf_ms])
    head = ["turn", "prompt tokens", "prefix-hit tokens", "TTFT off ms", "TTFT on ms",
            "on/off", "HF TTFT ms (no reuse)"]  # fmt: skip
    return (
        f"{table(head, rows)}\n\nTurn 5 on/off = **{rows[-1][5]:.2f}x** (target <= 0.3x). "
        f"Each turn: the whole conversation + 40 new tokens, a 32-token greedy answer; "
        f"best of {repeats} conversations, each on a fresh engine; {b.label}, {b.dtype_name}."
    )


# ---------------------------------------------------------------- held-out text


def heldout_tokens(num_tokens: int) -> torch.Tensor | None:
    """The first `num_tokens` of the held-out corpus, prepared and tokenised as in
    training (lab.labs.common.heldout_ids); None when unavailable on this machine."""
    ids = heldout_ids()
    return ids[:num_tokens] if ids is not None and len(ids) >= num_tokens else None


def hf_window_nll(hf, window: torch.Tensor) -> tuple[float, int]:
    """lab.labs.common.window_nll for a transformers model: (summed next-token
    cross-entropy in nats, tokens scored) of one window."""
    with torch.inference_mode():
        logits = hf(window[None]).logits[0].float()
        return F.cross_entropy(logits[:-1], window[1:], reduction="sum").item(), len(window) - 1


# ---------------------------------------------------------------- (e) speculative


def section_e(b: Bench) -> str:
    """Speculative decoding against its cost model: bench/speculative.py."""
    from bench.speculative import section_e as speculative_section

    return speculative_section(b)


# ---------------------------------------------------------------- (f) quantisation


def section_f(b: Bench) -> str:
    if importlib.util.find_spec("lab.engine.quant") is None:
        return "skipped: lab/engine/quant.py does not exist yet"
    from lab.engine.quant import quantize_model
    from lab.engine.quant import weight_bytes as quant_bytes

    num_windows = 4 if b.quick else 8
    text = heldout_tokens(num_windows * 512) if b.bundled else None
    windows = [w.to(b.device) for w in text.split(512)] if text is not None else []
    prompt = random_ids(random.Random(1), 32, b.target.config.vocab_size)
    new, repeats = (64, 2) if b.quick else (128, 3)
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        act = str(dtype).removeprefix("torch.")
        for bits in (None, 8, 4):
            model = copy.deepcopy(b.target).to(dtype)
            if bits:
                quantize_model(model, bits, group_size=64)
            name = {None: act, 8: f"int8 ({act} act.)", 4: f"int4 g64 ({act} act.)"}[bits]
            ppl = perplexity([window_nll(model, w) for w in windows]) if windows else "n/a"
            rows.append([f"ours {name}", f"{quant_bytes(model) / 1e6:.2f}",
                         ours_decode_ms(model, prompt, new, repeats), ppl])  # fmt: skip
        hf = b.hf if dtype == b.dtype else hf_twin(copy.deepcopy(b.target).to(dtype))
        ppl = perplexity([hf_window_nll(hf, w) for w in windows]) if windows else "n/a"
        rows.append([f"HF {act}", f"{quant_bytes(hf) / 1e6:.2f}",
                     hf_decode_ms(hf, prompt, new, repeats), ppl])  # fmt: skip
    scored = f"{num_windows} windows of 512 held-out tokens" if windows else "n/a (random model)"
    head = ["weights", "weight MB", "ms/token (bs=1)", "held-out perplexity"]
    return (
        f"{table(head, rows)}\n\n{b.label}; embeddings and lm_head stay in the float dtype "
        f"(quant.py's default). Perplexity: {scored}, same windows for every row. ms/token: "
        f"best of {repeats} greedy runs of {new} new tokens (ours TPOT; HF as in (a))."
    )


# ---------------------------------------------------------------- (g) roofline


def linear_chain_ms(model: LlamaModel, repeats: int) -> float:
    """ms of one pass of bare `F.linear` calls, one per linear weight of `model` (bs=1, its
    dtype): the matmuls a decode step cannot avoid, with no other work; best of N."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {w.shape[1]: torch.randn(1, w.shape[1], dtype=w.dtype, device=w.device)
              for w in weights}  # fmt: skip

    def chain() -> None:
        for _ in range(8):
            for w in weights:
                F.linear(inputs[w.shape[1]], w)

    with torch.inference_mode():
        chain()
        return min(timed(chain, model.device)[0] for _ in range(repeats)) / 8 * 1000


def roofline_timings(b: Bench, new: int, rounds: int) -> tuple[int, dict[str, float]]:
    """(weight bytes, best ms/token per engine) of the roofline model, the three engines
    measured in turn each round so load changes hit all alike."""
    model = random_model(ROOFLINE_SHAPE, b.device, b.dtype)
    hf = hf_twin(model)
    prompt = random_ids(random.Random(2), 32, ROOFLINE_SHAPE["vocab_size"])
    measures = {
        "ours (paged)": lambda: ours_decode_ms(model, prompt, new, 1),
        "bare F.linear chain (same weights)": lambda: linear_chain_ms(model, 2),
        "HF generate": lambda: hf_decode_ms(hf, prompt, new, 1),
    }
    best = dict.fromkeys(measures, math.inf)
    for _ in range(rounds):
        for label, measure in measures.items():
            best[label] = min(best[label], measure())
    return weight_bytes(model), best


def section_g(b: Bench) -> str:
    new, rounds = (32, 2) if b.quick else (64, 3)
    size, best = roofline_timings(b, new, rounds)
    bandwidth = copy_bandwidth_gbps(b.device)
    roof = bandwidth * 1e9 / size
    chain = best["bare F.linear chain (same weights)"]
    rows = [[label, ms, 1000 / ms, size / ms / 1e6, roof, 100 * 1000 / ms / roof,
             f"{100 * chain / ms:.0f}%"] for label, ms in best.items()]  # fmt: skip
    head = ["engine", "ms/token", "tok/s", "achieved GB/s", "roofline tok/s", "% of roofline",
            "speed vs F.linear chain"]  # fmt: skip
    ours = best["ours (paged)"]
    bytes_per = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2}[b.dtype]
    return (
        f"{table(head, rows)}\n\nours = **{100 * chain / ours:.0f}%** of the bare F.linear "
        f"chain's speed (target >= 90%) and **{100 * 1000 / ours / roof:.1f}%** of the "
        f"copy-bandwidth roofline (target >= 60% in bf16). Random Llama, "
        f"{size / bytes_per / 1e6:.0f}M params (hidden 768, 12 layers, 12 heads, 4 KV heads, "
        f"intermediate 2048, vocab 32000, untied), {b.dtype_name}, bs=1: {size / 1e6:.0f} MB "
        f"of weights, all counted as read per token as gpt-fast does (the "
        f"{32000 * 768 * bytes_per / 1e6:.0f} MB embedding table really is not; the chain "
        f"skips it). Copy bandwidth **{bandwidth:.1f} GB/s** (512 MB tensor copy, best of 5, "
        f"bytes read + written, {torch.get_num_threads()} threads). 32-token prompt, {new} "
        f"new tokens; best of {rounds} rounds, the three measured in turn."
    )


# ---------------------------------------------------------------- main

SECTIONS = {
    "a": ("(a) bs=1 decode latency", section_a),
    "b": ("(b) mixed workload: continuous vs static batching", section_b),
    "c": ("(c) KV bytes allocated vs used at peak", section_c),
    "d": ("(d) 5-turn chat: TTFT with prefix caching on vs off", section_d),
    "e": ("(e) speculative decoding", section_e),
    "f": ("(f) weight-only quantisation", section_f),
    "g": ("(g) roofline: ~110M model at bs=1", section_g),
}


def build(quick: bool, device: str, dtype: torch.dtype) -> Bench:
    """The bundled target and HF's copy of it (both in `dtype`), or a random model of its
    shape."""
    if (WEIGHTS / "target" / "model.safetensors").exists():
        target, bundled = bundled_model("target", dtype, device), True
    else:
        from lab.engine.training.models import target_config  # the bundled target's shape

        target, bundled = random_model(target_config(3072).to_dict(), device, dtype), False
    return Bench(quick, device, dtype, target, hf_twin(target), bundled)


def _newer(a: Path, b: Path) -> bool:
    return a.exists() and b.exists() and a.stat().st_mtime > b.stat().st_mtime + 60


def main(argv: list[str] | None = None) -> int:
    """Run the sections; returns how many failed (each failure is printed, the rest run)."""
    parser = argparse.ArgumentParser(prog="python -m bench.engine", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller workloads (~half time)")
    parser.add_argument("--sections", default="".join(SECTIONS), help="e.g. abd")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        help="default: the measured fastest correct dtype (var/engine_dtype.json)",
    )
    parser.add_argument("--compile", action="store_true", help="(a): also torch.compile")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    started = time.perf_counter()
    now = datetime.datetime.now().isoformat(timespec="seconds")
    dtype, why = (args.dtype, "set by --dtype") if args.dtype else default_dtype(args.device)
    print(f"# python -m bench.engine {' '.join(sys.argv[1:])} ({now})\n\n{machine()}")
    print(f"Device {args.device}, dtype {dtype} (ours and HF), threads {args.threads}.")
    print(f"dtype: {why}")
    bench = build(args.quick, args.device, DTYPES[dtype])
    bench.compile = args.compile
    if bench.bundled and _newer(WEIGHTS / "tokenizer.json", WEIGHTS / "target"):
        print("\nWarning: weights/tokenizer.json is newer than weights/target: a training run "
              "may be rewriting weights/; held-out text may not match these weights.")  # fmt: skip
    failed = 0
    for key in args.sections:
        title, run = SECTIONS[key]
        print(f"\n### {title}\n", flush=True)
        t0 = time.perf_counter()
        try:
            print(run(bench))
        except Exception as exc:  # one broken section must not hide the others
            traceback.print_exc()
            print(f"failed: {exc!r}")
            failed += 1
        elapsed, load = time.perf_counter() - t0, os.getloadavg()[0]
        print(f"\n({elapsed:.0f} s; load average {load:.1f} after)", flush=True)
    load = os.getloadavg()[0]
    print(f"\nTotal {time.perf_counter() - started:.0f} s; load average at the end {load:.1f}.")
    return failed


if __name__ == "__main__":
    main()
