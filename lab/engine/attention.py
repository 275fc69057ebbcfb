"""Attention: the one causal attention function and the backends the model calls.

The model calls `backend.attend(layer, q, k, v)` and never knows how K/V are stored (see
docs/ENGINE.md, "The attention seam"). `DenseAttention` keeps no cache (every call carries
whole sequences); `PagedAttention` and `ContiguousAttention` store the new K/V in a `KVPool`
and attend over each sequence's history there. The model runner builds one backend per step.
"""

from __future__ import annotations

import itertools
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
    # 4-D [1, heads, tokens, dim]: on CPU only 4-D inputs reach the fused (flash) kernel;
    # 3-D ones fall back to the math path, which materialises the [heads, new, total]
    # scores (2.6-4x slower at 256-512 tokens, and its cost jumps when they leave L2).
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k[None], v[None], attn_mask=mask, is_causal=is_causal
    )
    return out[0].transpose(0, 1)


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


def grouped_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """SDPA of q [S, n_heads, new, dim] over k, v [S, kv_heads, L, dim] with GQA, the query
    heads that share a KV head folded into the query axis: [S, kv_heads, group * new, dim].

    Same result as `enable_gqa=True` (query head h reads KV head h // group), but the CPU
    kernel then reads each KV head once for its whole group: at one new token per sequence
    it ran 9x faster in bf16 and 1.3-2.2x in fp32 on a 2-core AMD EPYC (8-16 sequences,
    150-300 keys; docs/ENGINE.md, "Speed"). mask: [S, 1, new or 1, L] bool, or None."""
    seqs, heads, new, dim = q.shape
    kv_heads = k.shape[1]
    group = heads // kv_heads
    folded = q.reshape(seqs, kv_heads, group * new, dim)
    if mask is not None and new > 1:  # each folded row keeps its token's mask row
        mask = mask.expand(seqs, 1, new, mask.shape[-1]).repeat(1, 1, group, 1)
    out = F.scaled_dot_product_attention(folded, k, v, attn_mask=mask)
    return out.view(seqs, heads, new, dim)


def decode_attention(
    kv_layer: Tensor, q: Tensor, gather: Tensor, key_mask: Tensor | None
) -> Tensor:
    """One SDPA call for S sequences with one new token each.

    kv_layer: one layer's pool [2, regions, region_len, kv_heads, dim]; q [S, n_heads, dim];
    gather [S, L] flat slot of each sequence's key j; key_mask [S, 1, 1, L] (None: all L keys
    are real). Padding slots are read with weight 0, so the pool must hold finite values
    (zeros when built, K/V after): NaN x 0 would still be NaN."""
    kv_heads, dim = kv_layer.shape[-2:]
    flat = kv_layer.view(2, -1, kv_heads, dim)
    keys = flat[0].index_select(0, gather.flatten()).view(*gather.shape, kv_heads, dim)
    values = flat[1].index_select(0, gather.flatten()).view(*gather.shape, kv_heads, dim)
    out = grouped_attention(
        q.unsqueeze(2),
        keys.to(q.dtype).transpose(1, 2),
        values.to(q.dtype).transpose(1, 2),
        key_mask,
    )
    return out.squeeze(2)  # [S, n_heads, dim]


class _CachedAttention:
    """Shared step logic over a pool whose slot of (sequence i, position p) is
    table[i, p // region_len] * region_len + p % region_len (paged: the block table;
    contiguous: one region per sequence). Every index of the step (where the new K/V go,
    which slots each sequence reads) is built once here with tensor ops, not per layer.

    `num_padding` extra rows (batch-size bucketing) may follow the real tokens: they are
    never stored and attend to one pool slot only; their outputs are to be ignored."""

    def __init__(
        self,
        kv: Tensor,
        table: Tensor,
        num_cached_tokens: Seq[int],
        num_new_tokens: Seq[int],
        num_padding: int = 0,
    ):
        self.kv = kv  # [layers, 2, regions, region_len, kv_heads, dim]
        self.num_cached = list(num_cached_tokens)
        self.num_new = list(num_new_tokens)
        self.num_padding = num_padding
        self.region_len = kv.shape[3]
        self.table = table  # [S, W] region indices, CPU
        device = kv.device
        cached = torch.tensor(self.num_cached, dtype=torch.long)
        new = torch.tensor(self.num_new, dtype=torch.long)
        self.slots = self._slots_of_new_tokens(cached, new).to(device)
        idx = [i for i, n in enumerate(self.num_new) if n == 1]
        self._decode_idx = idx
        self._decode = self._plan_decode(cached, idx, device)
        starts = [0, *itertools.accumulate(self.num_new)]
        self._prefills = [
            (
                starts[i],
                starts[i] + n,
                self._history_slots(i, c + n).to(device),
                causal_mask(c, n, device),
            )
            for i, (c, n) in enumerate(zip(self.num_cached, self.num_new, strict=True))
            if n != 1
        ]

    def _flat_slot(self, seq: Tensor, pos: Tensor) -> Tensor:
        r = self.region_len
        return self.table[seq, pos // r] * r + pos % r

    def _slots_of_new_tokens(self, cached: Tensor, new: Tensor) -> Tensor:
        """Flat slot index of every new token [T], sequence after sequence."""
        seq = torch.repeat_interleave(torch.arange(len(self.num_new)), new)
        starts = torch.cumsum(new, 0) - new
        pos = cached[seq] + torch.arange(len(seq)) - starts[seq]
        return self._flat_slot(seq, pos)

    def _history_slots(self, seq: int, total: int) -> Tensor:
        pos = torch.arange(total)
        return self._flat_slot(torch.full_like(pos, seq), pos)

    def _plan_decode(self, cached: Tensor, idx: list[int], device: torch.device) -> tuple:
        """(rows in q, gather [S, L], key mask [S, 1, 1, L] or None) of the decode rows
        (padding rows included), or None when there are none."""
        if not idx and not self.num_padding:
            return None
        seqs = torch.tensor(idx, dtype=torch.long)
        totals = cached[seqs] + 1
        length = int(totals.max()) if idx else 1
        pos = torch.arange(length)
        gather = self._flat_slot(seqs[:, None], pos[None, :])
        starts = torch.cumsum(torch.tensor([0, *self.num_new]), 0)
        rows = starts[seqs]
        if self.num_padding:  # padding rows read slot 0 of region 0 only
            gather = torch.cat((gather, torch.zeros(self.num_padding, length, dtype=torch.long)))
            totals = torch.cat((totals, torch.ones(self.num_padding, dtype=torch.long)))
            rows = torch.cat((rows, starts[-1] + torch.arange(self.num_padding)))
        mask = None
        if bool((totals != length).any()):
            mask = (pos[None, :] < totals[:, None])[:, None, None, :].to(device)
        all_rows = len(rows) == int(starts[-1]) + self.num_padding
        return (None if all_rows else rows.to(device), gather.to(device), mask)

    def _decode_plan(self) -> tuple:
        """(decode sequence indices, ...): kept for tests and introspection."""
        return (self._decode_idx, *(self._decode or ()))

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Store k/v of the T new tokens, return attention [T, n_heads, dim] (contract)."""
        real = len(self.slots)
        if q.shape[0] != real + self.num_padding:
            raise ValueError(f"q has {q.shape[0]} tokens; the step has {real}.")
        kv_layer = self.kv[layer]
        kv_heads, dim = kv_layer.shape[-2:]
        k_flat, v_flat = kv_layer[0].view(-1, kv_heads, dim), kv_layer[1].view(-1, kv_heads, dim)
        k_flat.index_copy_(0, self.slots, k[:real].to(k_flat.dtype))
        v_flat.index_copy_(0, self.slots, v[:real].to(v_flat.dtype))
        if self._decode is not None:
            rows, gather, mask = self._decode
            if rows is None and not self._prefills:  # decode-only step: no scatter back
                return decode_attention(kv_layer, q, gather, mask)
            out = torch.empty_like(q)
            out.index_copy_(
                0, rows, decode_attention(kv_layer, q.index_select(0, rows), gather, mask)
            )
        else:
            out = torch.empty_like(q)
        for start, end, history, mask in self._prefills:
            keys = k_flat.index_select(0, history).to(q.dtype)
            values = v_flat.index_select(0, history).to(q.dtype)
            out[start:end] = causal_attention(q[start:end], keys, values, mask)
        return out


def _pool_tensor(pool: KVPool | Tensor) -> Tensor:
    return pool.kv if isinstance(pool, KVPool) else pool


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
        num_padding: int = 0,
    ):
        kv = _pool_tensor(pool)
        if block_size != kv.shape[3]:
            raise ValueError(f"block_size {block_size} != pool block size {kv.shape[3]}.")
        tables = [list(t) for t in block_tables]
        for table, cached, new in zip(tables, num_cached_tokens, num_new_tokens, strict=True):
            if cached + new > len(table) * block_size:
                raise ValueError("A block table is too short for its tokens: append_slot first.")
        width = max((len(t) for t in tables), default=0) or 1
        padded = torch.tensor(
            [t + [0] * (width - len(t)) for t in tables] or [[0]], dtype=torch.long
        )
        super().__init__(kv, padded, num_cached_tokens, num_new_tokens, num_padding)


class ContiguousAttention(_CachedAttention):
    """Backend over contiguous regions: sequence i's token p lives at [slots[i], p]."""

    def __init__(
        self,
        pool_tensor: KVPool | Tensor,
        slots: Seq[int],
        num_cached_tokens: Seq[int],
        num_new_tokens: Seq[int],
        num_padding: int = 0,
    ):
        kv = _pool_tensor(pool_tensor)
        if any(c + n > kv.shape[3] for c, n in zip(num_cached_tokens, num_new_tokens, strict=True)):
            raise ValueError(f"A sequence exceeds max_model_len ({kv.shape[3]}).")
        self.regions = list(slots)
        table = torch.tensor([[r] for r in self.regions] or [[0]], dtype=torch.long)
        super().__init__(kv, table, num_cached_tokens, num_new_tokens, num_padding)
