"""Attention: the one causal attention function and the backends the model calls.

The model calls `backend.attend(layer, q, k, v)` and never knows how K/V are stored (see
docs/ENGINE.md, "The attention seam"). `DenseAttention` keeps no cache (every call carries
whole sequences); `PagedAttention` and `ContiguousAttention` store the new K/V in a `KVPool`
and attend over each sequence's history there. The model runner builds one backend per step.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence as Seq
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

from lab.engine.kv_pool import KVPool


class AttentionBackend(Protocol):
    """Where K/V live. See docs/ENGINE.md, "The attention seam"."""

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """q: [T, n_heads, head_dim]; k, v: [T, n_kv_heads, head_dim] -> [T, n_heads, head_dim]."""
        ...


def causal_mask(num_cached: int, num_new: int, device: torch.device) -> Tensor | None:
    """[new, cached + new] bool (True = attend): new token j sees keys 0 .. cached + j.
    None for a single new token, which sees everything."""
    if num_new <= 1:
        return None
    query_pos = torch.arange(num_cached, num_cached + num_new, device=device)
    return torch.arange(num_cached + num_new, device=device)[None, :] <= query_pos[:, None]


def causal_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Causal SDPA of one sequence's new tokens over its whole history.

    q: [new, n_heads, dim]; k, v: [total, kv_heads, dim] with total = cached + new, new token
    j at position cached + j. Returns [new, n_heads, dim]; each KV head serves
    n_heads // kv_heads query heads. `mask`: `causal_mask(cached, new)`, passed when the
    caller reuses it across layers; without one, a whole sequence (new == total) lets SDPA
    apply the causal rule itself (`is_causal`), and a lone new token sees every key.
    """
    num_new, total = q.shape[0], k.shape[0]
    if mask is None and 1 < num_new < total:
        mask = causal_mask(total - num_new, num_new, q.device)
    is_causal = mask is None and num_new == total
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [n_heads, total, dim]
    v = v.repeat_interleave(group, dim=1).transpose(0, 1)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k, v, attn_mask=mask, is_causal=is_causal
    )
    return out.transpose(0, 1)


class DenseAttention:
    """No-cache backend: every call carries whole sequences (the "none" mode; tests).

    seq_lens: token count of each sequence, in the order they are concatenated.
    """

    def __init__(self, seq_lens: Seq[int]) -> None:
        self.seq_lens = list(seq_lens)

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Causal attention within each sequence; q [T, H, D], k/v [T, H_kv, D] -> [T, H, D]."""
        if q.shape[0] != sum(self.seq_lens):
            raise ValueError(
                f"DenseAttention got {q.shape[0]} tokens but seq_lens sum to "
                f"{sum(self.seq_lens)}; pass every token of every sequence."
            )
        outputs = [
            causal_attention(qs, ks, vs)
            for qs, ks, vs in zip(
                q.split(self.seq_lens), k.split(self.seq_lens), v.split(self.seq_lens), strict=True
            )
        ]
        return torch.cat(outputs)


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
            mask = self.masks[i]  # built once per step, not once per layer
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
