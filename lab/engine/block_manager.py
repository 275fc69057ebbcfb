"""The paged KV block manager with prefix caching (vLLM's, after nano-vllm's).

Bookkeeping only: which block of the pool holds which tokens of which sequence. The K/V
tensors themselves live in `kv_pool.KVPool`; the attention backends read the block tables.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import OrderedDict, deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any, Protocol


class SequenceLike(Protocol):
    """What a block manager needs of a `sequence.Sequence` (duck-typed: tests pass their own)."""

    seq_id: int
    token_ids: list[int]  # prompt + generated
    num_prompt_tokens: int
    block_table: list[int]
    num_cached_tokens: int


def block_hash(token_ids: Seq[int], parent_hash: int | None) -> int:
    """Stable 64-bit key of a full block, chained on the previous block's key.

    blake2b over the bytes, so keys are equal across processes (Python's hash() is salted).
    """
    head = b"\x00" if parent_hash is None else b"\x01" + parent_hash.to_bytes(8, "little")
    body = struct.pack(f"<{len(token_ids)}q", *token_ids)
    return int.from_bytes(hashlib.blake2b(head + body, digest_size=8).digest(), "little")


@dataclass
class Block:
    """One page of `block_size` token slots in the pool."""

    block_id: int
    ref_count: int = 0
    hash: int | None = None  # set once the block is full (prefix-cache key)
    token_ids: list[int] = field(default_factory=list)


class BlockManager:
    """Paged KV blocks: free list, ref counts, prefix hash chain and an LRU of cached blocks.

    Free blocks live in two places: `_free` (never hashed, handed out first) and `_cached`
    (freed blocks that still hold a hashed prefix, oldest first, evicted on demand).
    """

    def __init__(self, num_blocks: int, block_size: int = 16, enable_prefix_caching: bool = True):
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must both be at least 1.")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))
        self._cached: OrderedDict[int, None] = OrderedDict()  # LRU: first = evict next
        self._hash_to_block: dict[int, int] = {}
        self._num_sealed: dict[int, int] = {}  # seq_id -> leading full blocks, final
        self.prefix_hits = 0  # full blocks reused
        self.prefix_misses = 0  # full blocks looked up and not found
        self.prefix_hit_tokens = 0
        self.evictions = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks with no reference (never hashed + cached-but-evictable)."""
        return len(self._free) + len(self._cached)

    def _num_blocks_for(self, num_tokens: int) -> int:
        return math.ceil(num_tokens / self.block_size)

    def _prefix_hits(self, token_ids: list[int]) -> list[int]:
        """Block ids of the cached prefix of `token_ids`. Capped so that at least the last
        token is computed: at most (len - 1) // block_size blocks."""
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        parent: int | None = None
        bs = self.block_size
        for i in range((len(token_ids) - 1) // bs):
            chunk = token_ids[i * bs : (i + 1) * bs]
            parent = block_hash(chunk, parent)
            block_id = self._hash_to_block.get(parent)
            if block_id is None or self.blocks[block_id].token_ids != chunk:
                break  # a miss breaks the chain: later blocks have other parents
            hits.append(block_id)
        return hits

    def _free_blocks_needed(self, num_blocks: int, hits: list[int]) -> int:
        # Hits on in-use blocks cost nothing; hits on cached free blocks still use one.
        live_hits = sum(1 for b in hits if self.blocks[b].ref_count > 0)
        return num_blocks - live_hits

    def can_allocate(self, seq: SequenceLike) -> bool:
        """Enough free blocks for all of seq's tokens, after prefix hits."""
        hits = self._prefix_hits(seq.token_ids)
        needed = self._free_blocks_needed(self._num_blocks_for(len(seq.token_ids)), hits)
        return needed <= self.num_free_blocks

    def allocate(self, seq: SequenceLike) -> None:
        """Build seq.block_table for all its tokens (prompt, plus any generated ones after a
        preemption) and set seq.num_cached_tokens to the tokens covered by prefix hits."""
        if seq.seq_id in self._num_sealed:
            raise ValueError(f"Sequence {seq.seq_id} already holds blocks; free it first.")
        if not seq.token_ids:
            raise ValueError(f"Sequence {seq.seq_id} has no tokens to allocate.")
        hits = self._prefix_hits(seq.token_ids)
        num_blocks = self._num_blocks_for(len(seq.token_ids))
        if self._free_blocks_needed(num_blocks, hits) > self.num_free_blocks:
            raise RuntimeError("Not enough free KV blocks: call can_allocate() first.")
        for block_id in hits:
            self._claim(block_id)
        table = hits + [self._take_free_block() for _ in range(num_blocks - len(hits))]
        seq.block_table = table
        seq.num_cached_tokens = len(hits) * self.block_size
        self._num_sealed[seq.seq_id] = len(hits)
        if self.enable_prefix_caching:
            eligible = (len(seq.token_ids) - 1) // self.block_size
            self.prefix_hits += len(hits)
            self.prefix_misses += eligible - len(hits)
            self.prefix_hit_tokens += seq.num_cached_tokens
        self._sync_blocks(seq)

    def can_append(self, seq: SequenceLike) -> bool:
        """Room for all of seq's tokens (one new block if the last token starts one)."""
        missing = self._num_blocks_for(len(seq.token_ids)) - len(seq.block_table)
        return missing <= self.num_free_blocks

    def append_slot(self, seq: SequenceLike) -> None:
        """Call after appending a token to seq.token_ids: grows the block table when the
        token starts a new block and registers blocks that became full (prefix cache)."""
        if seq.seq_id not in self._num_sealed:
            raise ValueError(f"Sequence {seq.seq_id} holds no blocks; allocate it first.")
        missing = self._num_blocks_for(len(seq.token_ids)) - len(seq.block_table)
        if missing > self.num_free_blocks:
            raise RuntimeError("No free KV block: call can_append() first or preempt.")
        seq.block_table.extend(self._take_free_block() for _ in range(missing))
        self._sync_blocks(seq)

    def free(self, seq: SequenceLike) -> None:
        """Drop seq's references; hashed blocks stay findable in the LRU until evicted."""
        if self._num_sealed.pop(seq.seq_id, None) is None:
            raise ValueError(f"Sequence {seq.seq_id} holds no blocks (freed twice?).")
        # Tail first, so a sequence's last blocks are evicted before its shared prefix.
        for block_id in reversed(seq.block_table):
            self._release(block_id)
        seq.block_table = []
        seq.num_cached_tokens = 0

    def stats(self, kv_bytes_per_token: int = 0) -> dict[str, Any]:
        """Block and prefix-cache counters; bytes need KVPool.bytes_per_token (0: bytes 0)."""
        in_use = [b for b in self.blocks if b.ref_count > 0]
        used_tokens = sum(len(b.token_ids) for b in in_use)
        allocated_tokens = len(in_use) * self.block_size
        lookups = self.prefix_hits + self.prefix_misses
        return {
            "num_blocks": len(self.blocks),
            "block_size": self.block_size,
            "allocated_blocks": len(in_use),
            "free_blocks": self.num_free_blocks,
            "cached_free_blocks": len(self._cached),
            "num_seqs": len(self._num_sealed),
            "allocated_tokens": allocated_tokens,
            "used_tokens": used_tokens,
            "allocated_bytes": allocated_tokens * kv_bytes_per_token,
            "used_bytes": used_tokens * kv_bytes_per_token,
            "prefix_hits": self.prefix_hits,
            "prefix_misses": self.prefix_misses,
            "prefix_hit_rate": self.prefix_hits / lookups if lookups else 0.0,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "evictions": self.evictions,
        }

    def _sync_blocks(self, seq: SequenceLike) -> None:
        """Copy token ids into seq's blocks past the sealed (full) ones; seal and hash the
        blocks that are now full, so later requests can hit them."""
        bs = self.block_size
        for i in range(self._num_sealed[seq.seq_id], len(seq.block_table)):
            block = self.blocks[seq.block_table[i]]
            block.token_ids = seq.token_ids[i * bs : (i + 1) * bs]
            if len(block.token_ids) < bs:
                break
            if self.enable_prefix_caching:
                parent = self.blocks[seq.block_table[i - 1]].hash if i > 0 else None
                self._register(block, block_hash(block.token_ids, parent))
            self._num_sealed[seq.seq_id] = i + 1

    def _register(self, block: Block, key: int) -> None:
        # A block with the same key may exist already (the capped last prompt block, or
        # equal continuations): keep that one findable; this one only carries the chain.
        block.hash = key
        self._hash_to_block.setdefault(key, block.block_id)

    def _claim(self, block_id: int) -> None:
        """Take a reference on a prefix-hit block (live, or cached in the LRU)."""
        self._cached.pop(block_id, None)
        self.blocks[block_id].ref_count += 1

    def _take_free_block(self) -> int:
        """A never-hashed free block if any, else evict the least recently used cached one."""
        if self._free:
            block_id = self._free.popleft()
        elif self._cached:
            block_id, _ = self._cached.popitem(last=False)
            del self._hash_to_block[self.blocks[block_id].hash]
            self.evictions += 1
        else:
            raise RuntimeError("No free KV block left.")
        block = self.blocks[block_id]
        block.hash, block.token_ids, block.ref_count = None, [], 1
        return block_id

    def _release(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count <= 0:
            raise RuntimeError(f"Block {block_id} released with ref_count {block.ref_count}.")
        block.ref_count -= 1
        if block.ref_count > 0:
            return
        if block.hash is not None and self._hash_to_block.get(block.hash) == block_id:
            self._cached[block_id] = None  # most recently used end
        else:
            block.hash, block.token_ids = None, []
            self._free.append(block_id)
