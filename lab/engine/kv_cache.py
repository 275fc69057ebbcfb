"""KV cache: paged block manager with prefix caching, the preallocated KV pool, and the
attention backends that read and write it (paged and contiguous).

The model calls `backend.attend(layer, q, k, v)` and never knows how K/V are stored; the
engine builds one backend per step from the scheduled sequences (see docs/ENGINE.md).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import struct
from collections import OrderedDict, deque
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor


class SequenceLike(Protocol):
    """What the cache needs of a `scheduler.Sequence` (duck-typed to avoid an import)."""

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


def kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
) -> int:
    """Bytes of K and V one token occupies across all layers (KV heads, not query heads)."""
    return num_layers * 2 * num_kv_heads * head_dim * dtype.itemsize


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


def kv_usage(manager: BlockManager | ContiguousAllocator, kv_bytes_per_token: int) -> dict:
    """Allocated vs used KV bytes right now, and the wasted fraction of what is allocated."""
    stats = manager.stats(kv_bytes_per_token)
    allocated, used = stats["allocated_bytes"], stats["used_bytes"]
    return {
        "allocated_bytes": allocated,
        "used_bytes": used,
        "wasted_bytes": allocated - used,
        "waste_fraction": (allocated - used) / allocated if allocated else 0.0,
    }


class KVPool:
    """One preallocated tensor [num_layers, 2 (K, V), num_blocks, block_size, kv_heads, dim]."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        shape = (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim)
        self.kv = torch.zeros(shape, dtype=dtype, device=device)  # finite: see attend()
        self.block_size = block_size
        self.bytes_per_token = kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype)

    @property
    def bytes_total(self) -> int:
        """Bytes of the whole pool."""
        return self.kv.numel() * self.kv.element_size()


class _CachedAttention:
    """Shared step logic: store new K/V at their slots, then per sequence causal SDPA of the
    new queries over its gathered history. Subclasses say where slots are."""

    def __init__(self, kv: Tensor, num_cached_tokens: Seq[int], num_new_tokens: Seq[int]):
        self.kv = kv  # [layers, 2, regions, region_len, kv_heads, dim]
        self.num_cached = list(num_cached_tokens)
        self.num_new = list(num_new_tokens)
        self.region_len = kv.shape[3]
        # One mask per sequence per step, shared by all layers.
        pairs = list(zip(self.num_cached, self.num_new, strict=True))
        self.masks = [causal_mask(cached, new, kv.device) for cached, new in pairs]
        self._decode: tuple | None = None  # the batched-decode plan, built on first use

    def _decode_plan(self) -> tuple:
        """Sequences with one new token (decode) are attended in one padded SDPA call:
        (seq indices, their rows in q, key mask [S, 1, 1, L], L). Empty below 2 such."""
        if self._decode is None:
            idx = [i for i, n in enumerate(self.num_new) if n == 1]
            if len(idx) < 2:
                self._decode = ([], None, None, 0)
            else:
                starts = [0, *itertools.accumulate(self.num_new)]
                totals = torch.tensor([self.num_cached[i] + 1 for i in idx])
                length = int(totals.max())
                mask = torch.arange(length)[None, :] < totals[:, None]
                device = self.kv.device
                rows = torch.tensor([starts[i] for i in idx], device=device)
                self._decode = (idx, rows, mask[:, None, None, :].to(device), length)
        return self._decode

    def _padded_history(self, cache: Tensor, seqs: list[int], length: int) -> Tensor:
        """[S, length, kv_heads, dim] keys or values of `seqs`, padded past each one's end."""
        raise NotImplementedError

    def _slot_mapping(self, regions_per_seq: list[Tensor]) -> Tensor:
        """Flat slot index (region * region_len + offset) of every new token, on kv.device."""
        slots = []
        for regions, cached, new in zip(
            regions_per_seq, self.num_cached, self.num_new, strict=True
        ):
            pos = torch.arange(cached, cached + new)
            slots.append(regions[pos // self.region_len] * self.region_len + pos % self.region_len)
        flat = torch.cat(slots) if slots else torch.empty(0, dtype=torch.long)
        return flat.to(self.kv.device)

    def _history(self, cache: Tensor, seq: int, total: int) -> Tensor:
        """[total, kv_heads, dim] keys or values of sequence `seq` (cache: one layer's K/V)."""
        raise NotImplementedError

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Store k/v of the T new tokens, return attention [T, n_heads, dim] (contract)."""
        if q.shape[0] != sum(self.num_new):
            raise ValueError(f"q has {q.shape[0]} tokens; the step has {sum(self.num_new)}.")
        k_cache, v_cache = self.kv[layer, 0], self.kv[layer, 1]
        kv_heads, dim = k_cache.shape[-2:]
        k_cache.view(-1, kv_heads, dim).index_copy_(0, self.slots, k.to(k_cache.dtype))
        v_cache.view(-1, kv_heads, dim).index_copy_(0, self.slots, v.to(v_cache.dtype))
        out = torch.empty_like(q)
        batched, rows, key_mask, length = self._decode_plan()
        if batched:  # all decode sequences in one call: no per-sequence Python loop
            # Padding slots are read with attention weight 0, so the pool must hold finite
            # values (zeros when built, KV after): NaN x 0 would still be NaN. Zeroing the
            # padding instead cost more than the per-sequence loop this replaces (CPU).
            keys = self._padded_history(k_cache, batched, length).to(q.dtype).transpose(1, 2)
            values = self._padded_history(v_cache, batched, length).to(q.dtype).transpose(1, 2)
            queries = q.index_select(0, rows).unsqueeze(2)  # [S, n_heads, 1, dim]
            attended = F.scaled_dot_product_attention(
                queries, keys, values, attn_mask=key_mask, enable_gqa=True
            )
            out.index_copy_(0, rows, attended.squeeze(2))
        done = set(batched)
        start = 0
        for i, (cached, new) in enumerate(zip(self.num_cached, self.num_new, strict=True)):
            if i in done:
                start += new
                continue
            keys = self._history(k_cache, i, cached + new).to(q.dtype)
            values = self._history(v_cache, i, cached + new).to(q.dtype)
            mask = self.masks[i]
            out[start : start + new] = causal_attention(q[start : start + new], keys, values, mask)
            start += new
        return out


class PagedAttention(_CachedAttention):
    """Backend over a paged KVPool: sequence i's token p lives in
    block_tables[i][p // block_size] at offset p % block_size."""

    def __init__(
        self,
        pool: KVPool | Tensor,
        block_tables: Seq[Seq[int]],
        num_cached_tokens: Seq[int],
        num_new_tokens: Seq[int],
        block_size: int,
    ):
        super().__init__(
            pool.kv if isinstance(pool, KVPool) else pool, num_cached_tokens, num_new_tokens
        )
        if block_size != self.region_len:
            raise ValueError(f"block_size {block_size} != pool block size {self.region_len}.")
        tables = [torch.tensor(list(t), dtype=torch.long) for t in block_tables]
        for table, cached, new in zip(tables, self.num_cached, self.num_new, strict=True):
            if cached + new > len(table) * block_size:
                raise ValueError("A block table is too short for its tokens: append_slot first.")
        self.slots = self._slot_mapping(tables)
        self.tables = [t.to(self.kv.device) for t in tables]

    def _history(self, cache: Tensor, seq: int, total: int) -> Tensor:
        num_blocks = math.ceil(total / self.region_len)
        blocks = cache.index_select(0, self.tables[seq][:num_blocks])
        return blocks.flatten(0, 1)[:total]

    def _padded_history(self, cache: Tensor, seqs: list[int], length: int) -> Tensor:
        num_blocks = math.ceil(length / self.region_len)
        table = torch.zeros(len(seqs), num_blocks, dtype=torch.long)  # pad: block 0, masked
        for row, seq in enumerate(seqs):
            blocks = self.tables[seq][:num_blocks].cpu()
            table[row, : len(blocks)] = blocks
        gathered = cache.index_select(0, table.flatten().to(cache.device))
        return gathered.view(len(seqs), num_blocks * self.region_len, *cache.shape[2:])[:, :length]


class ContiguousAttention(_CachedAttention):
    """Backend over contiguous regions: sequence i's token p lives at [slots[i], p]."""

    def __init__(
        self,
        pool_tensor: KVPool | Tensor,
        slots: Seq[int],
        num_cached_tokens: Seq[int],
        num_new_tokens: Seq[int],
    ):
        kv = pool_tensor.kv if isinstance(pool_tensor, KVPool) else pool_tensor
        super().__init__(kv, num_cached_tokens, num_new_tokens)
        if any(c + n > self.region_len for c, n in zip(self.num_cached, self.num_new, strict=True)):
            raise ValueError(f"A sequence exceeds max_model_len ({self.region_len}).")
        self.regions = list(slots)
        self.slots = self._slot_mapping([torch.tensor([r]) for r in self.regions])

    def _history(self, cache: Tensor, seq: int, total: int) -> Tensor:
        return cache[self.regions[seq], :total]

    def _padded_history(self, cache: Tensor, seqs: list[int], length: int) -> Tensor:
        regions = torch.tensor([self.regions[s] for s in seqs], device=cache.device)
        return cache.index_select(0, regions)[:, :length]


def causal_mask(num_cached: int, num_new: int, device: torch.device) -> Tensor | None:
    """[new, cached + new] bool (True = attend): new token j sees keys 0 .. cached + j.
    None for a single new token, which sees everything."""
    if num_new <= 1:
        return None
    query_pos = torch.arange(num_cached, num_cached + num_new, device=device)
    return torch.arange(num_cached + num_new, device=device)[None, :] <= query_pos[:, None]


def causal_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """SDPA of q: [new, n_heads, dim] over k, v: [total, kv_heads, dim] with `mask` from
    causal_mask. Returns [new, n_heads, dim]; each KV head serves n_heads // kv_heads."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [n_heads, total, dim]
    v = v.repeat_interleave(group, dim=1).transpose(0, 1)
    out = F.scaled_dot_product_attention(q.transpose(0, 1), k, v, attn_mask=mask)
    return out.transpose(0, 1)
