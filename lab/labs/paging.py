"""Paging: KV memory wasted by contiguous reservation vs paged blocks of each size.

A seeded batch of sequences of random lengths is decoded on the engine in contiguous mode
(each sequence reserves max_model_len slots up front) and in paged mode at several block
sizes. Requests are admitted in a staggered way so that every sequence reaches its full
length at the same step; there the lab stops the batch and measures, without the formula:
the pool is filled with a marker before the run (common.UNWRITTEN), the bytes written are
the pool's head vectors no longer all marker, and the bytes reserved are the sequences'
blocks (regions) x bytes per block. Waste is the reserved share never written.

The prediction is the bank's arithmetic on the known lengths: paged waste is
1 - mean_len / paged_tokens with paged_tokens = mean(ceil(len / block) x block), contiguous
waste is 1 - mean_len / max_len. Both must match the measurement exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.common import bundled_shape, mark_unwritten, random_model, written_bytes
from lab.labs.formulas import contiguous_waste, paged_waste

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"contiguous-predicted": 0, "paged-predicted": 0}


def workload(params: dict) -> list[tuple[int, int]]:
    """Seeded (prompt_tokens, decode_tokens) per sequence; their sum is its length."""
    rng = random.Random(params["seed"])
    work = []
    for _ in range(params["sequences"]):
        length = rng.randint(params["min_len"], params["max_len"])
        decode = rng.randint(0, min(params["decode_max"], length - 1))
        work.append((length - decode, decode))
    return work


def block_sizes(largest: int) -> list[int]:
    """Powers of two from 1 up to `largest`."""
    return [2**i for i in range(int(math.log2(largest)) + 1)]


def predicted_waste(lengths: list[int], block_size: int | None, max_model_len: int) -> dict:
    """Exact waste of the lengths; block_size None means contiguous reservation."""
    mean_len = sum(lengths) / len(lengths)
    if block_size is None:
        return {"waste": contiguous_waste(mean_len, max_model_len),
                "reserved_tokens": len(lengths) * max_model_len}  # fmt: skip
    reserved = sum(math.ceil(n / block_size) * block_size for n in lengths)
    return {
        "waste": paged_waste(mean_len, reserved / len(lengths)),
        "reserved_tokens": reserved,
        # the rule of thumb: on average half a block minus half a token per sequence
        "rule_of_thumb_waste_tokens": len(lengths) * (block_size - 1) / 2,
    }


def measure(model, work: list[tuple[int, int]], mode: str, block_size: int, p: dict) -> dict:
    """Run the batch until every sequence holds its full length; bytes written and reserved."""
    num_seqs = len(work)
    engine = LLMEngine(
        model,
        EngineConfig(
            mode=mode,
            block_size=block_size,
            max_model_len=p["max_model_len"],
            max_num_seqs=num_seqs,
            # every admitted prompt is prefilled whole in the step that admits it
            max_num_batched_tokens=num_seqs + sum(prompt for prompt, _ in work),
            enable_prefix_caching=False,
        ),
    )
    pool = engine.pool.kv
    mark_unwritten(pool)
    elem = pool.element_size()
    region_bytes = pool[:, :, 0].numel() * elem  # one block (paged) or one region
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(p["seed"])
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n, _ in work]
    last = max(decode for _, decode in work)
    ids: list[int] = []
    # A sequence decoding d tokens joins at step last - d, so all reach full length at once;
    # max_tokens d + 2 keeps each alive (holding its blocks) past that step.
    for step in range(last + 1):
        for prompt, (_, decode) in zip(prompts, work, strict=True):
            if decode == last - step:
                params = SamplingParams(temperature=0, max_tokens=decode + 2, ignore_eos=True)
                ids.append(engine.add_request(prompt, params))
        engine.step()
    seqs = [engine.requests[i].seq for i in ids]
    lengths = [seq.num_computed_tokens for seq in seqs]
    written = written_bytes(pool)
    reserved = sum(len(seq.block_table) for seq in seqs) * region_bytes
    usage = engine.kv_usage()
    for i in ids:
        engine.abort(i)
    return {
        "lengths": lengths,
        "written_bytes": written,
        "reserved_bytes": reserved,
        "waste": (reserved - written) / reserved,
        "manager_allocated_bytes": usage["allocated_bytes"],
        "manager_used_bytes": usage["used_bytes"],
        "pool_bytes": engine.pool.bytes_total,
    }


class Paging(Lab):
    slug = "paging"
    title = "Paging: KV waste of contiguous reservation vs block size"
    summary = (
        "A seeded batch of sequences of random lengths is run on the engine with contiguous "
        "KV reservation (every sequence reserves the full context up front) and with paged "
        "blocks of 1 to 128 tokens. When every sequence holds its full length the lab "
        "counts the KV bytes really written into the pool and the bytes reserved for the "
        "batch. Contiguous reservation wastes everything past each sequence's length; paging "
        "wastes only the unfilled tail of each sequence's last block, about (block − 1) / 2 "
        "tokens per sequence. The predicted waste is the bank's arithmetic on the known "
        "lengths and must match exactly."
    )
    topics = ("paged-attention", "kv-cache-basics")
    params = (
        Param("sequences", "Sequences", "int", 16, min=1, max=64),
        Param("min_len", "Shortest sequence", "int", 16, min=2, max=510, unit="tokens"),
        Param("max_len", "Longest sequence", "int", 400, min=2, max=510, unit="tokens"),
        Param("decode_max", "Decode steps (at most)", "int", 16, min=0, max=128, unit="tokens",
              help="each sequence's length is prompt + up to this many generated tokens"),
        Param("max_model_len", "Context reserved (contiguous)", "int", 512, min=4, max=512,
              unit="tokens"),
        Param("largest_block", "Largest block size", "choice", "128",
              choices=("16", "32", "64", "128", "256")),
        Param("seed", "Workload seed", "int", 0, min=0, max=2**31 - 1),
    )  # fmt: skip
    series = (
        Series("contiguous", "Contiguous reservation (measured)"),
        Series("contiguous-predicted", "Contiguous predicted", "predicted",
               predicts="contiguous", mode="lines",
               claim="exact", band=BANDS["contiguous-predicted"]),
        Series("paged", "Paged (measured)"),
        Series("paged-predicted", "Paged predicted", "predicted", predicts="paged",
               mode="lines", claim="exact", band=BANDS["paged-predicted"]),
    )  # fmt: skip
    chart = Chart("block size (tokens)", "KV reserved but unused (%)", x_type="log")
    time_limit_s = 120

    def check(self, params: dict) -> dict[str, str]:
        errors = {}
        if params["min_len"] > params["max_len"]:
            errors["min_len"] = "must not exceed the longest sequence"
        if params["max_len"] + 2 > params["max_model_len"]:
            errors["max_len"] = (
                f"must be at most the reserved context minus 2 ({params['max_model_len'] - 2}"
                " tokens): each sequence stays alive one token past its length"
            )
        return errors

    def predict(self, params: dict) -> list[Point]:
        lengths = [prompt + decode for prompt, decode in workload(params)]
        sizes = block_sizes(int(params["largest_block"]))
        contiguous = predicted_waste(lengths, None, params["max_model_len"])
        points = [Point("contiguous-predicted", b, 100 * contiguous["waste"]) for b in sizes]
        for b in sizes:
            paged = predicted_waste(lengths, b, params["max_model_len"])
            points.append(Point("paged-predicted", b, 100 * paged["waste"], paged))
        return points

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        work = workload(p)
        lengths = [prompt + decode for prompt, decode in work]
        sizes = block_sizes(int(p["largest_block"]))
        model = random_model(bundled_shape("target"), ctx.device)
        ctx.summary["mean_len_tokens"] = sum(lengths) / len(lengths)
        got = measure(model, work, "contiguous", 16, p)
        ctx.check_cancel()
        self._check_lengths(got, lengths)
        want = predicted_waste(lengths, None, p["max_model_len"])
        extra = self._extra(got, want)
        for b in sizes:  # one reservation, whatever the block size: a flat line
            yield Point("contiguous", b, 100 * got["waste"], extra)
        ctx.summary.update(contiguous_waste=got["waste"], contiguous_predicted=want["waste"],
                           contiguous_reserved_bytes=got["reserved_bytes"],
                           used_bytes=got["written_bytes"])  # fmt: skip
        for b in sizes:
            got = measure(model, work, "paged", b, p)
            ctx.check_cancel()
            self._check_lengths(got, lengths)
            want = predicted_waste(lengths, b, p["max_model_len"])
            extra = self._extra(got, want)
            extra["wasted_tokens"] = (got["reserved_bytes"] - got["written_bytes"]) / (
                got["written_bytes"] / sum(lengths)
            )
            extra["rule_of_thumb_waste_tokens"] = want["rule_of_thumb_waste_tokens"]
            yield Point("paged", b, 100 * got["waste"], extra)
            ctx.summary[f"paged_waste_b{b}"] = got["waste"]
            ctx.summary[f"paged_predicted_b{b}"] = want["waste"]

    @staticmethod
    def _extra(got: dict, want: dict) -> dict:
        return {
            "predicted": 100 * want["waste"],
            "reserved_bytes": got["reserved_bytes"],
            "written_bytes": got["written_bytes"],
            "reserved_over_used": got["reserved_bytes"] / got["written_bytes"],
            "manager_allocated_bytes": got["manager_allocated_bytes"],
            "manager_used_bytes": got["manager_used_bytes"],
        }

    @staticmethod
    def _check_lengths(got: dict, lengths: list[int]) -> None:
        if sorted(got["lengths"]) != sorted(lengths):
            raise RuntimeError(
                "The engine did not bring every sequence to its full length at the same "
                "step; the measurement would not be of the planned lengths."
            )


LAB = Paging()
