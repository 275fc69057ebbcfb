"""Decode sequences are attended in one padded SDPA call; it must equal attending each
sequence on its own (paged and contiguous, GQA, mixed with a chunked prefill)."""

from __future__ import annotations

import pytest
import torch

from lab.engine.attention import ContiguousAttention, PagedAttention, causal_attention


def reference(kv, histories, cached, new, q, layer=0):
    out, start = [], 0
    for hist, c, n in zip(histories, cached, new, strict=True):
        keys, values = hist(kv[layer, 0], c + n), hist(kv[layer, 1], c + n)
        mask = None
        if n > 1:
            pos = torch.arange(c, c + n)
            mask = torch.arange(c + n)[None, :] <= pos[:, None]
        out.append(causal_attention(q[start : start + n], keys, values, mask))
        start += n
    return torch.cat(out)


def test_batched_decode_equals_per_sequence_attention():
    torch.manual_seed(0)
    layers, blocks, block, kv_heads, heads, dim = 2, 40, 4, 2, 8, 16
    kv = torch.randn(layers, 2, blocks, block, kv_heads, dim)
    kv[:, :, 0] = 1e4  # padding gathers block 0: its (finite) values must get weight 0
    cached, new = [5, 0, 17, 2, 30], [1, 6, 1, 1, 1]  # one prefill among four decodes
    tables = [[3, 9], [1, 2], [4, 5, 6, 7, 8], [10], [11, 12, 13, 14, 15, 16, 17, 18]]
    t = sum(new)
    q, k, v = (
        torch.randn(t, heads, dim),
        torch.randn(t, kv_heads, dim),
        torch.randn(t, kv_heads, dim),
    )
    paged = PagedAttention(kv.clone(), tables, cached, new, block)
    got = paged.attend(1, q, k, v)
    assert paged._decode_plan()[0] == [0, 2, 3, 4]
    hists = [
        (lambda cache, total, tb=tb: cache[torch.tensor(tb)].flatten(0, 1)[:total]) for tb in tables
    ]
    torch.testing.assert_close(got, reference(paged.kv, hists, cached, new, q, layer=1))

    regions = [0, 1, 2, 3, 4]
    pool = torch.randn(layers, 2, 5, 40, kv_heads, dim)
    contiguous = ContiguousAttention(pool, regions, cached, new)
    got = contiguous.attend(0, q, k, v)
    hists = [(lambda cache, total, r=r: cache[r, :total]) for r in regions]
    torch.testing.assert_close(got, reference(contiguous.kv, hists, cached, new, q))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("new", [1, 3])
def test_grouped_attention_equals_sdpa_with_gqa(dtype, new):
    # folding a KV group's query heads into the query axis must not change the result:
    # query head h reads KV head h // group, each token keeps its own mask row
    import torch.nn.functional as F

    from lab.engine.attention import grouped_attention

    gen = torch.Generator().manual_seed(7)
    seqs, heads, kv_heads, length, dim = 4, 8, 2, 19, 16
    q = torch.randn(seqs, heads, new, dim, generator=gen).to(dtype)
    k = torch.randn(seqs, kv_heads, length, dim, generator=gen).to(dtype)
    v = torch.randn(seqs, kv_heads, length, dim, generator=gen).to(dtype)
    lengths = torch.tensor([19, 7, 12, 3]) + new - 1
    pos = torch.arange(length)
    query_pos = lengths[:, None] - new + torch.arange(new)[None, :]  # [S, new]
    mask = (pos[None, None, :] <= query_pos[:, :, None])[:, None]  # [S, 1, new, L]
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                          enable_gqa=True)  # fmt: skip
    got = grouped_attention(q, k, v, mask).float()
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    # a head paired with the wrong KV head would differ: the check can fail
    swapped = torch.cat([k[:, 1:], k[:, :1]], dim=1)
    assert not torch.allclose(grouped_attention(q, swapped, v, mask).float(), want, atol=tol)
