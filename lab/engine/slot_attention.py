"""SlotAttention: the attention backend of the speculative decoder (speculative.py).

Each sequence owns one region of max_model_len tokens (a slot), so its K/V are written and
read as slices: no block tables, slot mappings or gathers per pass, which matters when a
pass is a few small matmuls (a draft step). Same seam as attention.py's backends
(docs/ENGINE.md, "The attention seam").
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch
from torch import Tensor

from lab.engine.attention import causal_attention, causal_mask, grouped_attention


class SlotAttention:
    """Attention backend over one region per sequence: token p of the sequence in slot s
    lives at kv[layer, 0 (K) or 1 (V), s, p]. New K/V are written and the history is read
    as slices (views) of that region. One sequence goes through `causal_attention`; several
    with the same number of new tokens (every draft step, every verify pass but near the
    end) go through one padded SDPA call, as PagedAttention batches decode rows.

    kv: [layers, 2, slots, max_model_len, kv_heads, head_dim] (a KVPool whose "blocks" are
    whole slots). slots, num_cached_tokens, num_new_tokens: one entry per sequence, in the
    order their new tokens are concatenated.
    """

    def __init__(
        self, kv: Tensor, slots: Seq[int], num_cached_tokens: Seq[int], num_new_tokens: Seq[int]
    ) -> None:
        self.kv = kv
        self.spans = [
            (slot, cached, cached + new)
            for slot, cached, new in zip(slots, num_cached_tokens, num_new_tokens, strict=True)
        ]
        if any(end > kv.shape[3] for _, _, end in self.spans):
            raise ValueError(f"A sequence exceeds max_model_len ({kv.shape[3]}).")
        # One mask per sequence per pass, shared by all layers; None when SDPA needs none
        # (one new token, or a whole sequence, where it applies the causal rule itself).
        self.masks = [
            causal_mask(cached, end - cached, kv.device) if cached else None
            for _, cached, end in self.spans
        ]
        self.batched = self._batch_plan()

    def _batch_plan(self) -> tuple[Tensor, Tensor, int] | None:
        """(slots [S], key mask [S, 1, new, length], length) when 2+ sequences all have the
        same number of new tokens: query j of sequence i sees keys 0 .. cached_i + j."""
        if len(self.spans) < 2 or len({end - cached for _, cached, end in self.spans}) > 1:
            return None
        num_new = self.spans[0][2] - self.spans[0][1]
        length = max(end for _, _, end in self.spans)
        query_pos = torch.tensor([[c + j for j in range(num_new)] for _, c, _ in self.spans])
        mask = torch.arange(length)[None, None, :] <= query_pos[:, :, None]
        device = self.kv.device
        slots = torch.tensor([slot for slot, _, _ in self.spans], device=device)
        return slots, mask[:, None].to(device), length

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Store k/v of the new tokens, return attention [T, n_heads, dim] (the seam)."""
        k_cache, v_cache = self.kv[layer, 0], self.kv[layer, 1]
        if self.batched is not None:
            return self._attend_batched(k_cache, v_cache, q, k, v)
        outputs, start = [], 0
        for (slot, cached, end), mask in zip(self.spans, self.masks, strict=True):
            stop = start + end - cached
            k_cache[slot, cached:end] = k[start:stop]
            v_cache[slot, cached:end] = v[start:stop]
            history_k, history_v = k_cache[slot, :end], v_cache[slot, :end]
            outputs.append(causal_attention(q[start:stop], history_k, history_v, mask))
            start = stop
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)

    def _attend_batched(self, k_cache: Tensor, v_cache: Tensor, q: Tensor, k: Tensor, v: Tensor):
        slots, mask, length = self.batched
        num_seqs, heads, dim = len(self.spans), q.shape[1], q.shape[2]
        num_new = q.shape[0] // num_seqs
        for i, (slot, cached, end) in enumerate(self.spans):
            k_cache[slot, cached:end] = k[i * num_new : (i + 1) * num_new]
            v_cache[slot, cached:end] = v[i * num_new : (i + 1) * num_new]
        # Slots past a sequence's end hold zeros or stale K/V (finite): masked out.
        keys = k_cache[:, :length].index_select(0, slots).transpose(1, 2)  # [S, kv_h, L, d]
        values = v_cache[:, :length].index_select(0, slots).transpose(1, 2)
        queries = q.view(num_seqs, num_new, heads, dim).transpose(1, 2)  # [S, heads, new, d]
        out = grouped_attention(queries, keys.to(q.dtype), values.to(q.dtype), mask)
        return out.transpose(1, 2).reshape(num_seqs * num_new, heads, dim)
