"""CUDA graphs for decode steps (`EngineConfig.cuda_graphs`; CUDA only).

A decode step of a small model is launch-bound on a GPU: hundreds of tiny kernels. Each
bucket batch size (`EngineConfig.batch_buckets`) gets one graph, captured on first use, that
reads everything from static buffers: token ids, positions, the slot each new K/V goes to,
block tables padded to max_model_len, and each sequence's length. Replaying it is one launch.
Padding rows write to a scratch region the runner adds to the pool and attend to it alone.
"""

from __future__ import annotations

import bisect
import math

import torch
from torch import Tensor

from lab.engine.attention import decode_attention
from lab.engine.batch import ScheduledBatch
from lab.engine.config import EngineConfig
from lab.engine.kv_pool import KVPool
from lab.engine.model import LlamaModel


class TableDecodeAttention:
    """Decode backend whose every index comes from tensors (capturable): token i is stored at
    slots[i] and attends to the first lengths[i] positions of its row of `table`
    [S, W] (region indices), all W * region_len positions gathered and masked."""

    def __init__(self, kv: Tensor, slots: Tensor, table: Tensor, lengths: Tensor) -> None:
        self.kv, self.slots = kv, slots
        region_len = kv.shape[3]
        pos = torch.arange(table.shape[1] * region_len, device=kv.device)
        self.gather = table[:, pos // region_len] * region_len + pos % region_len
        self.key_mask = (pos[None, :] < lengths[:, None])[:, None, None, :]

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        kv_layer = self.kv[layer]
        kv_heads, dim = kv_layer.shape[-2:]
        kv_layer[0].view(-1, kv_heads, dim).index_copy_(0, self.slots, k.to(kv_layer.dtype))
        kv_layer[1].view(-1, kv_heads, dim).index_copy_(0, self.slots, v.to(kv_layer.dtype))
        return decode_attention(kv_layer, q, self.gather, self.key_mask)


class DecodeGraphs:
    """Captured decode steps over `pool` (whose last region is scratch for padding rows)."""

    def __init__(self, model: LlamaModel, pool: KVPool, config: EngineConfig) -> None:
        self.model, self.pool, self.config = model, pool, config
        self.region_len = pool.kv.shape[3]
        self.scratch = pool.kv.shape[2] - 1
        width = (
            1 if config.mode == "contiguous" else math.ceil(config.max_model_len / self.region_len)
        )
        rows, device = config.max_num_seqs, model.device
        self.ids = torch.zeros(rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.slots = torch.full((rows,), self.scratch * self.region_len, device=device)
        self.table = torch.full((rows, width), self.scratch, dtype=torch.long, device=device)
        self.lengths = torch.ones(rows, dtype=torch.long, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, Tensor]] = {}

    def fits(self, batch: ScheduledBatch) -> bool:
        """A decode-only batch no larger than the biggest bucket."""
        items = batch.items
        return len(items) <= self.config.max_num_seqs and all(
            item.num_new_tokens == 1 for item in items
        )

    def run(self, batch: ScheduledBatch) -> Tensor | None:
        """Logits [emitting sequences, vocab] of a decode-only batch, by graph replay."""
        items = batch.items
        buckets = self.config.batch_buckets
        size = buckets[bisect.bisect_left(buckets, len(items))]
        pad = size - len(items)
        width, r = self.table.shape[1], self.region_len
        tables = [self._row(item.seq.block_table, width) for item in items]
        tables += [[self.scratch] * width] * pad
        positions = [item.start_pos for item in items] + [0] * pad
        slots = [t[p // r] * r + p % r for t, p in zip(tables, positions, strict=True)]
        host = torch.tensor(
            [
                [item.seq.token_ids[item.start_pos] for item in items] + [0] * pad,
                positions,
                slots,
                [p + 1 for p in positions],
            ]
        )
        for buffer, values in zip(
            (self.ids, self.positions, self.slots, self.lengths), host, strict=True
        ):
            buffer[:size].copy_(values, non_blocking=True)
        self.table[:size].copy_(torch.tensor(tables), non_blocking=True)
        graph, logits = self.graphs.get(size) or self._capture(size)
        graph.replay()
        rows = [i for i, item in enumerate(items) if item.emits_token]
        return logits[rows] if rows else None

    def _row(self, table: list[int], width: int) -> list[int]:
        return (list(table) + [self.scratch] * width)[:width]

    def _forward(self, size: int) -> Tensor:
        backend = TableDecodeAttention(
            self.pool.kv, self.slots[:size], self.table[:size], self.lengths[:size]
        )
        hidden = self.model(self.ids[:size], self.positions[:size], backend)
        return self.model.logits(hidden)

    def _capture(self, size: int) -> tuple[torch.cuda.CUDAGraph, Tensor]:
        saved = [
            b.clone() for b in (self.ids, self.positions, self.slots, self.table, self.lengths)
        ]
        # Warm-up and capture write to the scratch region only.
        self.slots.fill_(self.scratch * self.region_len)
        self.table.fill_(self.scratch)
        with torch.inference_mode():
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self._forward(size)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                logits = self._forward(size)
        for buffer, value in zip(
            (self.ids, self.positions, self.slots, self.table, self.lengths), saved, strict=True
        ):
            buffer.copy_(value)
        self.graphs[size] = (graph, logits)
        return graph, logits
