"""Block accounting, prefix caching (hash chain, cap, LRU) and the paged / contiguous
attention backends against full causal attention."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
import torch

from lab.engine.attention import ContiguousAttention, PagedAttention
from lab.engine.block_manager import BlockManager, block_hash
from lab.engine.contiguous_allocator import ContiguousAllocator
from lab.engine.kv_pool import KVPool, kv_usage

BS = 16
LAYERS, N_HEADS, KV_HEADS, DIM = 2, 8, 2, 16


@dataclass
class Seq:
    seq_id: int
    token_ids: list[int]
    num_prompt_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0

    def __post_init__(self) -> None:
        self.num_prompt_tokens = self.num_prompt_tokens or len(self.token_ids)


def tokens(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def grow(bm: BlockManager, seq: Seq, n: int) -> None:
    """Decode n tokens: append each, then reserve its slot."""
    for _ in range(n):
        seq.token_ids.append(50_000 + len(seq.token_ids))
        assert bm.can_append(seq)
        bm.append_slot(seq)


# --- block accounting -----------------------------------------------------------------


def test_allocate_append_free_restores_free_count():
    bm = BlockManager(10, BS)
    seq = Seq(0, tokens(20))
    assert bm.can_allocate(seq)
    bm.allocate(seq)
    assert len(seq.block_table) == 2 and bm.num_free_blocks == 8
    assert seq.num_cached_tokens == 0
    grow(bm, seq, 12)  # 32 tokens: still 2 blocks
    assert len(seq.block_table) == 2
    grow(bm, seq, 1)  # 33rd token starts block 3
    assert len(seq.block_table) == 3 and bm.num_free_blocks == 7
    assert [bm.blocks[b].ref_count for b in seq.block_table] == [1, 1, 1]
    assert bm.stats()["used_tokens"] == 33
    bm.free(seq)
    assert bm.num_free_blocks == 10 and seq.block_table == []
    assert all(b.ref_count == 0 for b in bm.blocks)


def test_free_twice_and_allocate_twice_raise():
    bm = BlockManager(4, BS)
    seq = Seq(0, tokens(5))
    bm.allocate(seq)
    with pytest.raises(ValueError):
        bm.allocate(seq)
    bm.free(seq)
    with pytest.raises(ValueError):
        bm.free(seq)
    assert all(b.ref_count == 0 for b in bm.blocks) and bm.num_free_blocks == 4


def test_append_without_room_raises():
    bm = BlockManager(1, BS)
    seq = Seq(0, tokens(16))
    bm.allocate(seq)
    seq.token_ids.append(1)
    assert not bm.can_append(seq)
    with pytest.raises(RuntimeError):
        bm.append_slot(seq)


# --- prefix caching -------------------------------------------------------------------


def test_same_prompt_shares_full_blocks():
    bm = BlockManager(10, BS)
    a, b = Seq(0, tokens(40)), Seq(1, tokens(40))
    bm.allocate(a)
    bm.allocate(b)
    assert b.num_cached_tokens == 32 and a.num_cached_tokens == 0
    assert b.block_table[:2] == a.block_table[:2] and b.block_table[2] != a.block_table[2]
    assert [bm.blocks[x].ref_count for x in b.block_table] == [2, 2, 1]
    stats = bm.stats()
    assert (stats["prefix_hits"], stats["prefix_misses"], stats["prefix_hit_tokens"]) == (2, 2, 32)
    assert stats["allocated_blocks"] == 4 and bm.num_free_blocks == 6
    bm.free(a)
    assert [bm.blocks[x].ref_count for x in b.block_table] == [1, 1, 1]
    bm.free(b)
    assert bm.num_free_blocks == 10 and bm.stats()["cached_free_blocks"] == 2


def test_hit_on_freed_cached_blocks():
    bm = BlockManager(4, BS)
    a = Seq(0, tokens(40))
    bm.allocate(a)
    shared = a.block_table[:2]
    bm.free(a)
    b = Seq(1, tokens(40))
    assert bm.can_allocate(b)
    bm.allocate(b)
    assert b.num_cached_tokens == 32 and b.block_table[:2] == shared
    assert bm.num_free_blocks == 1


def test_changed_token_breaks_chain_from_that_block():
    bm = BlockManager(20, BS)
    bm.allocate(Seq(0, tokens(40)))
    in_block1 = tokens(40)
    in_block1[20] = 999
    s1 = Seq(1, in_block1)
    bm.allocate(s1)
    assert s1.num_cached_tokens == 16
    in_block0 = tokens(40)
    in_block0[3] = 999  # block 1 is identical, but its parent differs: no hit
    s2 = Seq(2, in_block0)
    bm.allocate(s2)
    assert s2.num_cached_tokens == 0
    assert bm.stats()["prefix_hits"] == 1


def test_cap_leaves_last_token_to_compute():
    bm = BlockManager(10, BS)
    a, b = Seq(0, tokens(32)), Seq(1, tokens(32))
    bm.allocate(a)
    bm.allocate(b)
    assert b.num_cached_tokens == 16  # not 32: the last token must be computed
    assert b.block_table[0] == a.block_table[0] and b.block_table[1] != a.block_table[1]
    bm.free(a)
    bm.free(b)
    assert bm.num_free_blocks == 10 and all(x.ref_count == 0 for x in bm.blocks)
    tiny = Seq(2, tokens(16))
    bm.allocate(tiny)
    assert tiny.num_cached_tokens == 0


def test_decode_filled_blocks_become_hits():
    bm = BlockManager(10, BS)
    a = Seq(0, tokens(20))
    bm.allocate(a)
    grow(bm, a, 12)  # block 1 is now full and registered
    b = Seq(1, [*a.token_ids, 7])
    bm.allocate(b)
    assert b.num_cached_tokens == 32 and b.block_table[:2] == a.block_table


def test_can_allocate_counts_live_hits_as_free():
    a, b = Seq(0, tokens(40)), Seq(1, tokens(40))
    full = BlockManager(3, BS)
    full.allocate(a)
    assert not full.can_allocate(b)  # needs one new block, none free
    roomy = BlockManager(4, BS)
    roomy.allocate(a)
    assert roomy.can_allocate(b)  # 2 live hits + 1 new block
    roomy.allocate(b)
    assert roomy.num_free_blocks == 0


def test_lru_evicts_never_hashed_first_then_oldest_tail_first():
    bm = BlockManager(8, BS)
    a, b = Seq(0, tokens(33)), Seq(1, tokens(33, start=1000))
    bm.allocate(a)
    bm.allocate(b)
    ta, tb = list(a.block_table), list(b.block_table)
    never_used = [x for x in range(8) if x not in ta + tb]
    bm.free(a)  # LRU: a1, a0 (a2 is partial: plain free list)
    bm.free(b)  # LRU: a1, a0, b1, b0
    c = Seq(2, tokens(96, start=2000))  # 6 blocks: 4 plain free, then evict a1, a0
    bm.allocate(c)
    assert c.block_table[:4] == [*never_used, ta[2], tb[2]]
    assert c.block_table[4:] == [ta[1], ta[0]]
    assert bm.stats()["evictions"] == 2
    bm.free(c)
    b2 = Seq(3, tokens(33, start=1000))
    bm.allocate(b2)
    assert b2.num_cached_tokens == 32  # b's blocks survived
    a2 = Seq(4, tokens(33))
    bm.allocate(a2)
    assert a2.num_cached_tokens == 0  # a's blocks were evicted


def test_prefix_caching_disabled_never_hits():
    bm = BlockManager(10, BS, enable_prefix_caching=False)
    bm.allocate(Seq(0, tokens(40)))
    b = Seq(1, tokens(40))
    bm.allocate(b)
    assert b.num_cached_tokens == 0 and bm.num_free_blocks == 4
    assert bm.stats()["used_tokens"] == 80


def test_block_hash_is_stable_across_processes():
    # Constants: Python's salted hash() would change them with PYTHONHASHSEED.
    first = block_hash(tokens(16), None)
    assert first == 3056791716588488810
    assert block_hash(tokens(16, start=16), first) == 1505821141519314614
    assert block_hash(tokens(16, start=16), None) != block_hash(tokens(16, start=16), first)


def test_contiguous_allocator_reserves_whole_regions():
    alloc = ContiguousAllocator(max_seqs=2, max_model_len=64)
    a, b, c = Seq(0, tokens(10)), Seq(1, tokens(64)), Seq(2, tokens(3))
    assert not alloc.can_allocate(Seq(9, tokens(65)))
    alloc.allocate(a)
    alloc.allocate(b)
    assert not alloc.can_allocate(c) and alloc.num_free_blocks == 0
    b.token_ids.append(1)
    assert not alloc.can_append(b)
    region_a = a.block_table
    alloc.free(a)
    with pytest.raises(ValueError):
        alloc.free(a)
    alloc.allocate(c)
    assert c.block_table == region_a and b.block_table != region_a
    assert alloc.stats()["allocated_tokens"] == 2 * 64 and alloc.stats()["used_tokens"] == 68


# --- attention backends ---------------------------------------------------------------


def reference_attention(q, k, v):
    """Full causal attention of one whole sequence: q [T, H, D], k/v [T, KV, D]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    causal = torch.ones(q.shape[0], q.shape[0], dtype=torch.bool).tril()
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return torch.einsum("hqk,khd->qhd", probs, v)


def random_qkv(gen, total):
    def draw(heads):
        return torch.randn(LAYERS, total, heads, DIM, generator=gen)

    return draw(N_HEADS), draw(KV_HEADS), draw(KV_HEADS)


def run_schedule(manager, seqs, qkvs, schedules, make_backend):
    """Run per-sequence lists of new-token counts step by step; decode steps append a token
    first. Returns each sequence's outputs [LAYERS, rows computed, H, D]."""
    pos = [s.num_cached_tokens for s in seqs]
    outs = [[[] for _ in range(LAYERS)] for _ in seqs]
    for step in range(max(len(s) for s in schedules)):
        batch = [i for i, sch in enumerate(schedules) if step < len(sch)]
        new = [schedules[i][step] for i in batch]
        for i, n in zip(batch, new, strict=True):
            if pos[i] + n > len(seqs[i].token_ids):
                grow(manager, seqs[i], pos[i] + n - len(seqs[i].token_ids))
        backend = make_backend([seqs[i] for i in batch], [pos[i] for i in batch], new)
        for layer in range(LAYERS):
            q, k, v = (
                torch.cat(
                    [
                        qkvs[i][j][layer, pos[i] : pos[i] + n]
                        for i, n in zip(batch, new, strict=True)
                    ]
                )
                for j in range(3)
            )
            out = backend.attend(layer, q, k, v)
            for i, part in zip(batch, out.split(new), strict=True):
                outs[i][layer].append(part)
        for i, n in zip(batch, new, strict=True):
            pos[i] += n
    return [torch.stack([torch.cat(rows) for rows in per_layer]) for per_layer in outs]


def paged_setup(num_blocks):
    pool = KVPool(LAYERS, num_blocks, BS, KV_HEADS, DIM, torch.float32, "cpu")

    def make(seqs, cached, new):
        return PagedAttention(pool, [s.block_table for s in seqs], cached, new, BS)

    return BlockManager(num_blocks, BS), make, pool


def contiguous_setup(max_seqs, max_model_len):
    pool = KVPool(LAYERS, max_seqs, max_model_len, KV_HEADS, DIM, torch.float32, "cpu")

    def make(seqs, cached, new):
        return ContiguousAttention(pool.kv, [s.block_table[0] for s in seqs], cached, new)

    return ContiguousAllocator(max_seqs, max_model_len), make, pool


PROMPTS = [21, 37, 9]
# Chunked prefill in 2 chunks then 4 decode steps; the short one decodes while the others
# are still prefilling (mixed steps).
SCHEDULES = [[11, 10, 1, 1, 1, 1], [20, 17, 1, 1, 1, 1], [5, 4, 1, 1, 1, 1]]
SCHEDULES_MIXED = [[11, 10, 1, 1, 1, 1], [20, 17, 1, 1, 1, 1], [9, 1, 1, 1, 1]]


@pytest.mark.parametrize("schedules", [SCHEDULES, SCHEDULES_MIXED])
@pytest.mark.parametrize("mode", ["paged", "contiguous"])
def test_chunked_attention_matches_full_causal_attention(mode, schedules):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    manager, make, pool = paged_setup(16) if mode == "paged" else contiguous_setup(3, 64)
    seqs = [Seq(i, tokens(n, start=1000 * i)) for i, n in enumerate(PROMPTS)]
    for seq in seqs:
        manager.allocate(seq)
    totals = [sum(s) for s in schedules]
    qkvs = [random_qkv(gen, t) for t in totals]
    outs = run_schedule(manager, seqs, qkvs, schedules, make)
    for (q, k, v), out in zip(qkvs, outs, strict=True):
        for layer in range(LAYERS):
            expected = reference_attention(q[layer], k[layer], v[layer])
            assert (out[layer] - expected).abs().max().item() <= 1e-5

    usage = kv_usage(manager, pool.bytes_per_token)
    assert usage["used_bytes"] == sum(totals) * pool.bytes_per_token
    if mode == "paged":
        slack = len(seqs) * BS * pool.bytes_per_token
        assert usage["used_bytes"] <= usage["allocated_bytes"] < usage["used_bytes"] + slack
    else:
        assert usage["allocated_bytes"] == len(seqs) * 64 * pool.bytes_per_token


def test_paged_attention_reads_shared_prefix_blocks():
    gen = torch.Generator().manual_seed(1)
    manager, make, _ = paged_setup(8)
    a = Seq(0, tokens(40))
    manager.allocate(a)
    qa = random_qkv(gen, 40)
    run_schedule(manager, [a], [qa], [[40]], make)
    b = Seq(1, [*tokens(32), *tokens(8, start=5000)])
    manager.allocate(b)
    assert b.num_cached_tokens == 32
    # Same tokens give the same K/V; B's own queries and its new tokens' K/V are fresh.
    q, k, v = random_qkv(gen, 43)
    k[:, :32], v[:, :32] = qa[1][:, :32], qa[2][:, :32]
    out = run_schedule(manager, [b], [(q, k, v)], [[8, 1, 1, 1]], make)[0]
    for layer in range(LAYERS):
        expected = reference_attention(q[layer], k[layer], v[layer])[32:]
        assert (out[layer] - expected).abs().max().item() <= 1e-5


def test_kv_pool_sizes():
    pool = KVPool(LAYERS, 5, BS, KV_HEADS, DIM, torch.float16, "cpu")
    assert pool.kv.shape == (LAYERS, 2, 5, BS, KV_HEADS, DIM)
    assert pool.bytes_per_token == LAYERS * 2 * KV_HEADS * DIM * 2
    assert pool.bytes_total == 5 * BS * pool.bytes_per_token


def test_backend_rejects_short_block_table_and_wrong_token_count():
    pool = KVPool(LAYERS, 4, BS, KV_HEADS, DIM)
    with pytest.raises(ValueError):
        PagedAttention(pool, [[0]], [10], [7], BS)
    backend = PagedAttention(pool, [[0]], [0], [4], BS)
    q = torch.zeros(3, N_HEADS, DIM)
    with pytest.raises(ValueError):
        backend.attend(0, q, torch.zeros(3, KV_HEADS, DIM), torch.zeros(3, KV_HEADS, DIM))
