"""The model runner: one scheduled batch in, the logits to sample from out.

It owns the KV pool. Each step it turns a `ScheduledBatch` into the model's inputs (the new
tokens of every sequence, flattened; their absolute positions; an attention backend that
knows each sequence's block table or region and how many of its tokens are cached), runs the
model, and returns the logits of the rows the engine samples from. Request bookkeeping and
the step loop stay in the engine.

Speed (docs/ENGINE.md, "Speed"): inputs are built with one tensor op per kind, not per token;
decode batches can be padded to bucket sizes (`EngineConfig.bucket_batches`) so shapes
repeat; `EngineConfig.compile` runs decode steps through `torch.compile`, and
`EngineConfig.cuda_graphs` replays them as CUDA graphs (cuda_graphs.py).
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from lab.engine.attention import (
    AttentionBackend,
    ContiguousAttention,
    DenseAttention,
    PagedAttention,
)
from lab.engine.batch import ScheduledBatch, ScheduledSeq
from lab.engine.config import EngineConfig
from lab.engine.kv_pool import KVPool
from lab.engine.model import LlamaModel


@dataclass
class ModelInput:
    """One step's inputs, on the model's device. T = new tokens of the step (all sequences),
    plus padding rows at the end when the batch was bucketed."""

    input_ids: Tensor  # [T] token ids, sequence after sequence in batch order
    positions: Tensor  # [T] absolute positions (RoPE)
    backend: AttentionBackend
    sample_rows: list[int]  # row in [T] of each emitting sequence's last token, batch order
    is_decode: bool = False  # every sequence computes exactly one token


class ModelRunner:
    """Runs `model` on scheduled batches: `run(batch)`, or `prepare(batch)` then `execute`.

    `pool` is the KV pool the cached modes write (None in mode "none", which recomputes every
    sequence's whole prefix each step). `compile_s`: seconds spent in torch.compile's first
    calls (0.0 without `EngineConfig.compile`).
    """

    def __init__(self, model: LlamaModel, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self.device = model.device
        self.use_graphs = (
            config.cuda_graphs and self.device.type == "cuda" and config.mode != "none"
        )
        self.pool = self._build_pool()
        self.compile_s = 0.0
        self._compiled = torch.compile(model, dynamic=True) if config.compile else None
        self._compiled_shapes: set[int] = set()
        self.graphs = None
        if self.use_graphs and self.pool is not None:
            from lab.engine.cuda_graphs import DecodeGraphs

            self.graphs = DecodeGraphs(model, self.pool, config)

    def _build_pool(self) -> KVPool | None:
        c, mc = self.config, self.model.config
        if c.mode == "none":
            return None
        if c.mode == "contiguous":  # one region of max_model_len slots per sequence
            num_blocks, block_size = c.max_num_seqs, c.max_model_len
        else:
            num_blocks, block_size = c.num_kv_blocks, c.block_size
        num_blocks += self.use_graphs  # a scratch region for the graphs' padding rows
        return KVPool(
            mc.num_hidden_layers,
            num_blocks,
            block_size,
            mc.num_key_value_heads,
            mc.head_dim,
            self.model.dtype,
            self.device,
        )

    def run(self, batch: ScheduledBatch) -> Tensor | None:
        """Logits [emitting sequences, vocab] in batch order; None when none emits a token."""
        if self.graphs is not None and self.graphs.fits(batch):
            return self.graphs.run(batch)
        return self.execute(self.prepare(batch))

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        """The flattened inputs and the attention backend of one step."""
        items = batch.items
        starts, counts = self._spans(items)
        ids = list(
            itertools.chain.from_iterable(
                item.seq.token_ids[a : a + n]
                for item, a, n in zip(items, starts, counts, strict=True)
            )
        )
        is_decode = self.config.mode != "none" and all(n == 1 for n in counts)
        padding = self._padding(len(items)) if is_decode else 0
        if is_decode:  # positions are the start positions; no expansion needed
            positions = torch.tensor(starts + [0] * padding, dtype=torch.long)
            rows = [i for i, item in enumerate(items) if item.emits_token]
        else:
            count_t = torch.tensor(counts, dtype=torch.long)
            offsets = torch.cumsum(count_t, 0) - count_t  # first row of each sequence
            positions = torch.repeat_interleave(torch.tensor(starts) - offsets, count_t)
            positions += torch.arange(len(ids))
            ends = itertools.accumulate(counts)
            rows = [end - 1 for item, end in zip(items, ends, strict=True) if item.emits_token]
        return ModelInput(
            torch.tensor(ids + [0] * padding, dtype=torch.long).to(self.device),
            positions.to(self.device),
            self._backend(items, padding),
            rows,
            is_decode,
        )

    def execute(self, inputs: ModelInput) -> Tensor | None:
        """Run the model; logits of `inputs.sample_rows` (None when there are none)."""
        rows = inputs.sample_rows
        with torch.inference_mode():
            model = self.model
            if self._compiled is not None and inputs.is_decode:
                model = self._compiled
            started = time.perf_counter()
            hidden = model(inputs.input_ids, inputs.positions, inputs.backend)
            if model is not self.model and len(inputs.input_ids) not in self._compiled_shapes:
                self._compiled_shapes.add(len(inputs.input_ids))  # first call: compiles
                self.compile_s += time.perf_counter() - started
            if not rows:
                return None
            if len(rows) == hidden.shape[0]:  # every row samples: no gather
                return self.model.logits(hidden)
            return self.model.logits(hidden[rows])

    def _padding(self, num_seqs: int) -> int:
        """Rows to add so a decode batch has a bucket size (0 unless bucketing is on)."""
        c = self.config
        if not (c.bucket_batches or c.compile):
            return 0
        buckets = c.batch_buckets
        i = bisect.bisect_left(buckets, num_seqs)
        return buckets[i] - num_seqs if i < len(buckets) else 0

    def _spans(self, items: list[ScheduledSeq]) -> tuple[list[int], list[int]]:
        """(first position, token count) each sequence computes this step."""
        if self.config.mode == "none":  # recompute every sequence's whole prefix
            return [0] * len(items), [item.start_pos + item.num_new_tokens for item in items]
        return [item.start_pos for item in items], [item.num_new_tokens for item in items]

    def _backend(self, items: list[ScheduledSeq], padding: int = 0) -> AttentionBackend:
        if self.config.mode == "none":
            return DenseAttention([item.start_pos + item.num_new_tokens for item in items])
        cached = [item.start_pos for item in items]
        new = [item.num_new_tokens for item in items]
        if self.config.mode == "paged":
            tables = [item.seq.block_table for item in items]
            return PagedAttention(self.pool, tables, cached, new, self.config.block_size, padding)
        regions = [item.seq.block_table[0] for item in items]
        return ContiguousAttention(self.pool, regions, cached, new, padding)
