"""SlotAttention (the speculative decoder's backend) against DenseAttention: the same
outputs whether sequences go one by one or batched, with ragged histories and rollback."""

from __future__ import annotations

import pytest
import torch

from lab.engine.attention import DenseAttention
from lab.engine.slot_attention import SlotAttention

HEADS, KV_HEADS, DIM, MAX_LEN = 4, 2, 8, 32


def dense_out(q_full, k_full, v_full, seq_lens):
    return DenseAttention(seq_lens).attend(0, q_full, k_full, v_full)


def qkv(total: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(total, HEADS, DIM, generator=g),
            torch.randn(total, KV_HEADS, DIM, generator=g),
            torch.randn(total, KV_HEADS, DIM, generator=g))  # fmt: skip


@pytest.mark.parametrize("new", [[1, 1, 1], [3, 3, 3], [2, 4, 1]])  # batched, batched, loop
def test_matches_dense_attention_over_whole_sequences(new):
    cached, slots = [5, 11, 0], [2, 0, 1]
    kv = torch.zeros(1, 2, 3, MAX_LEN, KV_HEADS, DIM)
    seqs = [qkv(c + n, seed=i) for i, (c, n) in enumerate(zip(cached, new, strict=True))]
    prefill = SlotAttention(kv, slots, [0, 0, 0], cached)  # history first (ragged)
    pieces = [[t[:c] for t in s] for s, c in zip(seqs, cached, strict=True)]
    prefill.attend(0, *(torch.cat([p[j] for p in pieces]) for j in range(3)))
    backend = SlotAttention(kv, slots, cached, new)
    assert (backend.batched is not None) == (len(set(new)) == 1)
    tails = [[t[c:] for t in s] for s, c in zip(seqs, cached, strict=True)]
    out = backend.attend(0, *(torch.cat([p[j] for p in tails]) for j in range(3)))
    lens = [c + n for c, n in zip(cached, new, strict=True)]
    full = dense_out(*(torch.cat([s[j] for s in seqs]) for j in range(3)), lens)
    rows = full.split(lens)
    expected = torch.cat([r[c:] for r, c in zip(rows, cached, strict=True)])
    torch.testing.assert_close(out, expected)


def test_rollback_overwrites_rejected_tokens():
    kv = torch.zeros(1, 2, 1, MAX_LEN, KV_HEADS, DIM)
    q, k, v = qkv(10, seed=7)
    SlotAttention(kv, [0], [0], [6]).attend(0, q[:6], k[:6], v[:6])
    junk = qkv(3, seed=8)
    SlotAttention(kv, [0], [6], [3]).attend(0, *junk)  # 3 drafts, all rejected
    out = SlotAttention(kv, [0], [6], [4]).attend(0, q[6:], k[6:], v[6:])
    torch.testing.assert_close(out, dense_out(q, k, v, [10])[6:])


def test_refuses_a_sequence_longer_than_its_slot():
    kv = torch.zeros(1, 2, 1, MAX_LEN, KV_HEADS, DIM)
    with pytest.raises(ValueError, match="max_model_len"):
        SlotAttention(kv, [0], [MAX_LEN - 1], [2])
