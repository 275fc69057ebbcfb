"""The pre-vLLM KV layout: every sequence reserves one region of `max_model_len` slots."""

from __future__ import annotations

from collections import deque
from typing import Any

from lab.engine.block_manager import SequenceLike


class ContiguousAllocator:
    """Pre-vLLM layout: each sequence reserves `max_model_len` slots up front in one region.

    Same duck-typed API as BlockManager, so a scheduler can use either: a sequence's
    `block_table` is `[region]` and a "block" is a whole region of `max_model_len` tokens.
    """

    def __init__(self, max_seqs: int, max_model_len: int):
        self.max_seqs = max_seqs
        self.max_model_len = max_model_len
        self._free: deque[int] = deque(range(max_seqs))
        self._seqs: dict[int, SequenceLike] = {}

    @property
    def num_free_blocks(self) -> int:
        """Free regions (one per sequence)."""
        return len(self._free)

    def can_allocate(self, seq: SequenceLike) -> bool:
        return bool(self._free) and len(seq.token_ids) <= self.max_model_len

    def allocate(self, seq: SequenceLike) -> None:
        if seq.seq_id in self._seqs:
            raise ValueError(f"Sequence {seq.seq_id} already holds a region; free it first.")
        if not self.can_allocate(seq):
            raise RuntimeError("No free region (or prompt > max_model_len): check first.")
        seq.block_table = [self._free.popleft()]
        seq.num_cached_tokens = 0
        self._seqs[seq.seq_id] = seq

    def can_append(self, seq: SequenceLike) -> bool:
        return len(seq.token_ids) <= self.max_model_len

    def append_slot(self, seq: SequenceLike) -> None:
        if not self.can_append(seq):
            raise RuntimeError(f"Sequence {seq.seq_id} is longer than max_model_len.")

    def free(self, seq: SequenceLike) -> None:
        if self._seqs.pop(seq.seq_id, None) is None:
            raise ValueError(f"Sequence {seq.seq_id} holds no region (freed twice?).")
        self._free.append(seq.block_table[0])
        seq.block_table = []
        seq.num_cached_tokens = 0

    def stats(self, kv_bytes_per_token: int = 0) -> dict[str, Any]:
        """Reserved vs used slots: every live sequence reserves max_model_len tokens."""
        allocated_tokens = len(self._seqs) * self.max_model_len
        used_tokens = sum(len(s.token_ids) for s in self._seqs.values())
        return {
            "num_seqs": len(self._seqs),
            "free_blocks": self.num_free_blocks,
            "allocated_tokens": allocated_tokens,
            "used_tokens": used_tokens,
            "allocated_bytes": allocated_tokens * kv_bytes_per_token,
            "used_bytes": used_tokens * kv_bytes_per_token,
        }
