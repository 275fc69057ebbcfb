"""The model runner: one scheduled batch in, the logits to sample from out.

It owns the KV pool. Each step it turns a `ScheduledBatch` into the model's inputs (the new
tokens of every sequence, flattened; their absolute positions; an attention backend that
knows each sequence's block table or region and how many of its tokens are cached), runs the
model, and returns the logits of the rows the engine samples from. Request bookkeeping and
the step loop stay in the engine.
"""

from __future__ import annotations

import itertools
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
    """One step's inputs, on the model's device. T = new tokens of the step (all sequences)."""

    input_ids: Tensor  # [T] token ids, sequence after sequence in batch order
    positions: Tensor  # [T] absolute positions (RoPE)
    backend: AttentionBackend
    sample_rows: list[int]  # row in [T] of each emitting sequence's last token, batch order


class ModelRunner:
    """Runs `model` on scheduled batches: `run(batch)`, or `prepare(batch)` then `execute`.

    `pool` is the KV pool the cached modes write (None in mode "none", which recomputes every
    sequence's whole prefix each step).
    """

    def __init__(self, model: LlamaModel, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        self.device = model.device
        self.pool = self._build_pool()

    def _build_pool(self) -> KVPool | None:
        c, mc = self.config, self.model.config
        if c.mode == "none":
            return None
        if c.mode == "contiguous":  # one region of max_model_len slots per sequence
            num_blocks, block_size = c.max_num_seqs, c.max_model_len
        else:
            num_blocks, block_size = c.num_kv_blocks, c.block_size
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
        return self.execute(self.prepare(batch))

    def prepare(self, batch: ScheduledBatch) -> ModelInput:
        """The flattened inputs and the attention backend of one step."""
        items = batch.items
        spans = self._spans(items)
        backend = self._backend(items)
        ids = [
            tok
            for item, (a, b) in zip(items, spans, strict=True)
            for tok in item.seq.token_ids[a:b]
        ]
        pos = [p for a, b in spans for p in range(a, b)]
        ends = itertools.accumulate(b - a for a, b in spans)
        rows = [end - 1 for item, end in zip(items, ends, strict=True) if item.emits_token]
        return ModelInput(
            torch.tensor(ids, dtype=torch.long, device=self.device),
            torch.tensor(pos, dtype=torch.long, device=self.device),
            backend,
            rows,
        )

    def execute(self, inputs: ModelInput) -> Tensor | None:
        """Run the model; logits of `inputs.sample_rows` (None when there are none)."""
        with torch.inference_mode():
            hidden = self.model(inputs.input_ids, inputs.positions, inputs.backend)
            rows = inputs.sample_rows
            return self.model.logits(hidden[rows]) if rows else None

    def _spans(self, items: list[ScheduledSeq]) -> list[tuple[int, int]]:
        """[start, end) token positions each sequence computes this step."""
        if self.config.mode == "none":  # recompute every sequence's whole prefix
            return [(0, item.start_pos + item.num_new_tokens) for item in items]
        return [(item.start_pos, item.start_pos + item.num_new_tokens) for item in items]

    def _backend(self, items: list[ScheduledSeq]) -> AttentionBackend:
        if self.config.mode == "none":
            return DenseAttention([item.start_pos + item.num_new_tokens for item in items])
        cached = [item.start_pos for item in items]
        new = [item.num_new_tokens for item in items]
        if self.config.mode == "paged":
            tables = [item.seq.block_table for item in items]
            return PagedAttention(self.pool, tables, cached, new, self.config.block_size)
        regions = [item.seq.block_table[0] for item in items]
        return ContiguousAttention(self.pool, regions, cached, new)
