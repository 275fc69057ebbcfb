"""Attention memory: the N x N score matrix of naive attention vs a tiled online softmax.

Naive attention materialises S = QKᵀ for every head (heads x N² values) before the softmax.
The tiled version (FlashAttention's idea, in plain PyTorch) walks the keys in blocks and
keeps a running row max and row sum, so only a heads x N x block tile of scores ever
exists, and the result is the same up to float rounding. FlashAttention also tiles the
queries, to fit the tile in on-chip SRAM; here all queries go at once.

Measured, not computed: on CUDA the allocator's peak (`torch.cuda.max_memory_allocated`);
on CPU every allocation and free the CPU allocator reports to `torch.profiler`
(profile_memory=True), replayed in order to find the peak. The output (heads x N x
head_dim, needed by both) is subtracted, leaving the intermediates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial

import torch
from torch import Tensor

from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.common import bundled_shape, sync, torch_dtype
from lab.labs.formulas import attention_scores_bytes, attention_tile_bytes

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"naive-predicted": 0.25, "tiled-predicted": 0.25}

MAX_SCORE_BYTES = 4 * 2**30  # the naive score matrix of the largest N must fit in this
_TARGET = bundled_shape("target")


def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(QKᵀ/√d)V for q, k, v [heads, N, d]; the softmax runs in place on S, so the
    N x N matrix exists once."""
    s = torch.bmm(q, k.transpose(1, 2)).mul_(q.shape[-1] ** -0.5)
    s.sub_(s.amax(-1, keepdim=True)).exp_()
    s.div_(s.sum(-1, keepdim=True))
    return torch.bmm(s, v)


def tiled_attention(q: Tensor, k: Tensor, v: Tensor, block: int) -> Tensor:
    """The same attention, one block of keys at a time (online softmax): per query row keep
    the running max m and running sum l of exp(score - m); when a block raises the max,
    rescale what was accumulated by exp(m_old - m_new)."""
    heads, n, _ = q.shape
    scale = q.shape[-1] ** -0.5
    m = torch.full((heads, n), float("-inf"), dtype=q.dtype, device=q.device)
    l = torch.zeros((heads, n), dtype=q.dtype, device=q.device)  # noqa: E741 (the paper's l)
    acc = torch.zeros_like(q)
    for start in range(0, k.shape[1], block):
        kb, vb = k[:, start : start + block], v[:, start : start + block]
        s = torch.bmm(q, kb.transpose(1, 2)).mul_(scale)  # the only score tile: [h, N, block]
        m_new = torch.maximum(m, s.amax(-1))
        s.sub_(m_new.unsqueeze(-1)).exp_()  # p = exp(s - m_new), in place
        correction = m.sub_(m_new).exp_()  # exp(m_old - m_new), reusing m's memory
        l.mul_(correction).add_(s.sum(-1))
        acc.mul_(correction.unsqueeze(-1)).baddbmm_(s, vb)
        m = m_new
        del s
    return acc.div_(l.unsqueeze(-1))


def peak_bytes(fn: Callable[[], Tensor], device: str) -> tuple[Tensor, int, float]:
    """(result, peak bytes allocated above the start while fn ran, seconds)."""
    if torch.device(device).type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        out = fn()
        sync(device)
        return out, torch.cuda.max_memory_allocated() - base, time.perf_counter() - start
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        start = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - start
    return out, _replay_peak(prof), seconds


def _replay_peak(prof) -> int:
    """Peak of the running sum of the allocator's alloc (+) and free (-) events."""
    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        size = getattr(node.extra_fields, "alloc_size", None)
        if size is not None:
            events.append((node.start_time_ns, size))
    current = peak = 0
    for _, size in sorted(events):
        current += size
        peak = max(peak, current)
    return peak


def doubling(start: int, stop: int) -> list[int]:
    values, v = [], start
    while v < stop:
        values.append(v)
        v *= 2
    return [*values, stop]


class AttentionMemory(Lab):
    slug = "attention-memory"
    title = "Attention memory: the N × N score matrix vs a tiled online softmax"
    summary = (
        "For each sequence length N, one layer's attention runs twice on the same random "
        "Q, K, V: naively, materialising the heads × N × N score matrix, and tiled, a block "
        "of keys at a time with a running max and running sum (FlashAttention's online "
        "softmax). Plotted is the peak memory of the intermediates (the peak above the "
        "inputs, less the output both produce), measured from the allocator: "
        "torch.cuda.max_memory_allocated on a GPU, on a CPU the allocation and free events "
        "torch.profiler records. Predicted: heads × N² × bytes for naive (the bank's "
        "expression) and heads × N × block × bytes for tiled, which also keeps a few "
        "per-row vectors (max, sum: heads × N each). The right axis shows how far apart the "
        "two outputs are: float rounding, not an approximation."
    )
    topics = ("flash-attention", "long-context")
    params = (
        Param("min_seq_len", "Shortest N", "int", 256, min=16, max=8192, unit="tokens"),
        Param("max_seq_len", "Longest N", "int", 4096, min=16, max=16384, unit="tokens",
              help="points at the shortest N, doubling, and this one"),
        Param("heads", "Query heads", "int", _TARGET["num_attention_heads"], min=1, max=64,
              help="default: the bundled target's"),
        Param("head_dim", "Head dim", "int", _TARGET["head_dim"], min=8, max=256,
              help="default: the bundled target's"),
        Param("block", "Key block (tile)", "int", 128, min=8, max=4096, unit="keys"),
        Param("dtype", "dtype", "choice", "fp32", choices=("fp32", "bf16", "fp16")),
    )  # fmt: skip
    series = (
        Series("naive", "Naive: measured peak"),
        Series("naive-predicted", "Naive: heads × N² × bytes", "predicted", predicts="naive",
               mode="lines", claim="estimate", band=BANDS["naive-predicted"]),
        Series("tiled", "Tiled: measured peak"),
        Series("tiled-predicted", "Tiled: heads × N × block × bytes", "predicted",
               predicts="tiled", mode="lines", claim="estimate", band=BANDS["tiled-predicted"]),
        Series("max-abs-diff", "max |naive − tiled| (right axis)", axis="y2",
               mode="markers"),
    )  # fmt: skip
    chart = Chart("sequence length N (tokens)", "peak bytes of intermediates",
                  y2_title="max |naive − tiled|", x_type="log", y_type="log")  # fmt: skip
    time_limit_s = 120

    def check(self, params: dict) -> dict[str, str]:
        if params["min_seq_len"] > params["max_seq_len"]:
            return {"min_seq_len": "must not exceed the longest N"}
        bytes_ = torch.empty(0, dtype=torch_dtype(params["dtype"])).element_size()
        need = attention_scores_bytes(params["max_seq_len"], params["heads"], bytes_)
        if need > MAX_SCORE_BYTES:
            return {"max_seq_len": f"the naive score matrix would need {need / 2**30:.1f} GiB "
                                   f"(limit {MAX_SCORE_BYTES / 2**30:.0f} GiB); lower the "
                                   "longest N or the heads"}  # fmt: skip
        return {}

    def predict(self, params: dict) -> list[Point]:
        bytes_ = torch.empty(0, dtype=torch_dtype(params["dtype"])).element_size()
        points = []
        for n in doubling(params["min_seq_len"], params["max_seq_len"]):
            points.append(
                Point("naive-predicted", n, attention_scores_bytes(n, params["heads"], bytes_))
            )
            tile = attention_tile_bytes(n, min(params["block"], n), params["heads"], bytes_)
            points.append(Point("tiled-predicted", n, tile))  # fmt: skip
        return points

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        dtype, device = torch_dtype(p["dtype"]), ctx.device
        gen = torch.Generator(device=device).manual_seed(0)

        def qkv(n: int) -> list[Tensor]:
            return [torch.randn(p["heads"], n, p["head_dim"], generator=gen, device=device)
                    .to(dtype) for _ in range(3)]  # fmt: skip

        warm = qkv(64)  # first profiler / kernel start-up outside the measured points
        peak_bytes(partial(naive_attention, *warm), device)
        peak_bytes(partial(tiled_attention, *warm, p["block"]), device)
        predicted = {(pt.series, pt.x): pt.y for pt in self.predict(p)}
        ctx.summary["warmup"] = (
            "discarded: one call of each kernel at N=64 first; a point is the allocator's peak "
            "bytes, a count that does not vary with load, so it is measured once (its time, "
            "in the points table, is not predicted)")  # fmt: skip
        worst = {"naive": 0.0, "tiled": 0.0, "diff": 0.0}
        measured_bytes: dict[str, int] = {}
        for n in doubling(p["min_seq_len"], p["max_seq_len"]):
            q, k, v = qkv(n)
            out_bytes = q.numel() * q.element_size()
            results = {}
            runs = {"naive": partial(naive_attention, q, k, v),
                    "tiled": partial(tiled_attention, q, k, v, p["block"])}  # fmt: skip
            for name, fn in runs.items():
                out, peak, seconds = peak_bytes(fn, device)
                results[name] = out
                measured = measured_bytes[name] = peak - out_bytes
                expected = predicted[(f"{name}-predicted", n)]
                ratio = measured / expected
                worst[name] = max(worst[name], abs(ratio - 1))
                extra = {"predicted": expected, "measured_over_predicted": ratio,
                         "peak_bytes_with_output": peak, "ms": seconds * 1000}  # fmt: skip
                yield Point(name, n, measured, extra)
                ctx.check_cancel()
            diff = (results["naive"].float() - results["tiled"].float()).abs().max().item()
            worst["diff"] = max(worst["diff"], diff)
            yield Point("max-abs-diff", n, diff)
            ctx.summary.update({
                "longest_n": n, "naive_bytes_longest_n": measured_bytes["naive"],
                "tiled_bytes_longest_n": measured_bytes["tiled"],
                "naive_over_tiled_longest_n": measured_bytes["naive"] / measured_bytes["tiled"],
            })  # fmt: skip
        ctx.summary.update({
            "naive_worst_relative_error": worst["naive"],
            "tiled_worst_relative_error": worst["tiled"],
            "max_abs_diff": worst["diff"],
        })  # fmt: skip


LAB = AttentionMemory()
