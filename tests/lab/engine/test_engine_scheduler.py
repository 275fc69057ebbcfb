"""Scheduler tests: continuous batching (decode-first, token budget, chunked prefill, FCFS,
preemption by recompute, abort, prefix hits) against the real BlockManager, and the
static-batching contrast.

The "model" is a deterministic fake whose KV cache is a dict slot -> token id: each step it
stores the new tokens at their slots (all sequences first, like the real backend), reads every
earlier token of the sequence back *from the cache* through the block table, and answers
next = f(all previous tokens). A wrong block table, a missing or stale block, or a wrong
start position therefore changes the output or raises KeyError.
"""

from __future__ import annotations

import random

import pytest

from lab.engine.batch import ScheduledBatch
from lab.engine.block_manager import BlockManager
from lab.engine.contiguous_allocator import ContiguousAllocator
from lab.engine.scheduler import Scheduler
from lab.engine.sequence import Sequence, SequenceStatus
from lab.engine.static_scheduler import StaticScheduler

VOCAB = 997


def next_token(tokens: list[int]) -> int:
    """The fake model: a deterministic function of the whole prefix."""
    state = 17
    for token in tokens:
        state = (state * 1_000_003 + token + 1) % (2**61 - 1)
    return state % VOCAB


def reference(prompt: list[int], max_tokens: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(next_token(tokens))
    return tokens[len(prompt) :]


def reached_max_tokens(seq: Sequence) -> bool:
    return seq.num_generated_tokens >= seq.sampling_params["max_tokens"]


class FakeModel:
    """Paged 'KV' of token ids: slot = (block id, offset)."""

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.slots: dict[tuple[int, int], int] = {}

    def _slot(self, seq: Sequence, position: int) -> tuple[int, int]:
        block = seq.block_table[position // self.block_size]
        return block, position % self.block_size

    def step(self, batch: ScheduledBatch) -> dict[int, int | None]:
        for item in batch.items:
            for position, token in zip(item.positions, item.input_ids, strict=True):
                self.slots[self._slot(item.seq, position)] = token
        new_tokens: dict[int, int | None] = {}
        for item in batch.items:
            end = item.start_pos + item.num_new_tokens
            history = [self.slots[self._slot(item.seq, p)] for p in range(end)]
            new_tokens[item.seq.seq_id] = next_token(history) if item.emits_token else None
        return new_tokens


def make_seq(seq_id: int, prompt: list[int], max_tokens: int) -> Sequence:
    return Sequence(seq_id, prompt, sampling_params={"max_tokens": max_tokens})


def random_prompt(rng: random.Random, length: int) -> list[int]:
    return [rng.randrange(VOCAB) for _ in range(length)]


def run(scheduler, model: FakeModel, arrivals=None, max_steps: int = 2000):
    """Drive schedule/step/postprocess; arrivals: {step: [seq, ...]}. Returns the batches."""
    arrivals = dict(arrivals or {})
    batches = []
    for step in range(max_steps):
        for seq in arrivals.pop(step, []):
            scheduler.add(seq)
        if not scheduler.has_unfinished() and not arrivals:
            return batches
        batch = scheduler.schedule()
        batches.append(batch)
        scheduler.postprocess(batch, model.step(batch))
    raise AssertionError("the scheduler did not drain its requests")


def make_scheduler(num_blocks=256, block_size=4, prefix=False, **kwargs) -> Scheduler:
    manager = BlockManager(num_blocks, block_size, enable_prefix_caching=prefix)
    return Scheduler(manager, is_finished=reached_max_tokens, **kwargs)


def test_decode_first_then_prefill_fills_the_rest_of_the_budget():
    scheduler = make_scheduler(max_num_seqs=8, max_num_batched_tokens=16)
    model = FakeModel(4)
    for i in range(3):
        scheduler.add(make_seq(i, [i + 1] * 4, max_tokens=10))
    first = scheduler.schedule()
    scheduler.postprocess(first, model.step(first))
    assert first.num_prefill_tokens == 12 and first.num_decode_tokens == 0
    scheduler.add(make_seq(9, list(range(40)), max_tokens=3))

    batch = scheduler.schedule()

    kinds = [(item.seq.seq_id, item.is_prefill) for item in batch.items]
    assert kinds == [(0, False), (1, False), (2, False), (9, True)]
    assert batch.num_decode_tokens == 3
    assert batch.num_prefill_tokens == 13  # the budget left after the decodes
    assert batch.items[3].start_pos == 0 and not batch.items[3].emits_token


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_random_workload_respects_budget_and_seq_cap_and_matches_reference(prefix_caching):
    rng = random.Random(0)
    scheduler = make_scheduler(
        num_blocks=24, prefix=prefix_caching, max_num_seqs=4, max_num_batched_tokens=24
    )
    shared = random_prompt(rng, 20)  # half the requests share a system prompt
    seqs = []
    for i in range(24):
        prompt = random_prompt(rng, rng.randint(1, 40))
        seqs.append(
            make_seq(i, shared[: rng.randint(8, 20)] * (i % 2) + prompt, rng.randint(1, 20))
        )
    arrivals = {}
    for seq in seqs:
        arrivals.setdefault(rng.randrange(20), []).append(seq)

    batches = run(scheduler, FakeModel(4), arrivals)

    for batch in batches:
        assert batch.num_batched_tokens <= 24
        assert batch.num_seqs <= 4
        decode_flags = [item.is_prefill for item in batch.items]
        assert decode_flags == sorted(decode_flags)  # all decodes come before any prefill
    for seq in seqs:
        assert seq.status is SequenceStatus.FINISHED
        assert seq.generated_token_ids == reference(
            seq.token_ids[: seq.num_prompt_tokens], seq.sampling_params["max_tokens"]
        )
    assert scheduler.block_manager.num_free_blocks == 24
    assert not scheduler.running and not scheduler.waiting and not scheduler._order
    assert scheduler.num_preemptions > 0  # the pool is too small for 4 long sequences
    if prefix_caching:
        assert scheduler.block_manager.stats()["prefix_hits"] > 0


def test_long_prompt_is_chunked_and_emits_only_when_its_prefill_is_done():
    ticks = iter(range(1000))
    manager = BlockManager(64, 4, enable_prefix_caching=False)
    scheduler = Scheduler(
        manager,
        max_num_seqs=4,
        max_num_batched_tokens=16,
        is_finished=reached_max_tokens,
        clock=lambda: float(next(ticks)),
    )
    prompt = list(range(100, 150))  # 50 tokens: chunks of 16, 16, 16, 2
    seq = make_seq(0, prompt, max_tokens=3)
    scheduler.add(seq)
    model = FakeModel(4)

    chunks = []
    for _ in range(4):
        batch = scheduler.schedule()
        (item,) = batch.items
        chunks.append((item.start_pos, item.num_new_tokens, item.emits_token))
        assert seq.first_token_time is None and seq.num_generated_tokens == 0
        scheduler.postprocess(batch, model.step(batch))

    assert chunks == [(0, 16, False), (16, 16, False), (32, 16, False), (48, 2, True)]
    assert seq.is_prefill_done and seq.num_generated_tokens == 1
    assert seq.first_token_time is not None
    run(scheduler, model)
    assert seq.generated_token_ids == reference(prompt, 3)


def test_chunked_prefill_shares_steps_with_decodes():
    scheduler = make_scheduler(max_num_seqs=4, max_num_batched_tokens=8)
    model = FakeModel(4)
    short, long = make_seq(0, [5, 6], max_tokens=6), make_seq(1, list(range(30)), max_tokens=2)
    batches = run(scheduler, model, {0: [short], 1: [long]})

    # while the long prompt is being chunked, the short one keeps decoding every step
    mixed = [b for b in batches if b.num_decode_tokens and b.num_prefill_tokens]
    assert len(mixed) >= 3
    assert all(b.num_prefill_tokens == 7 for b in mixed[:3])
    assert short.generated_token_ids == reference([5, 6], 6)
    assert long.generated_token_ids == reference(list(range(30)), 2)


def test_admission_is_first_come_first_served():
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64)
    seqs = [make_seq(i, [i] * (3 + i), max_tokens=2 + i % 3) for i in range(6)]
    batches = run(scheduler, FakeModel(4), {0: seqs})

    admitted = [item.seq.seq_id for b in batches for item in b.items if item.start_pos == 0]
    assert admitted == list(range(6))


def test_head_of_queue_is_not_overtaken_when_it_does_not_fit():
    # 10 blocks of 4 tokens: the running sequence holds 6, the big head needs 8, the small
    # request behind it would fit in the 4 left but must wait its turn (FCFS).
    scheduler = make_scheduler(num_blocks=10, max_num_seqs=4, max_num_batched_tokens=64)
    running, big, small = (
        make_seq(0, list(range(20)), max_tokens=4),
        make_seq(1, list(range(30)), max_tokens=2),
        make_seq(2, [7, 7], max_tokens=1),
    )
    batches = run(scheduler, FakeModel(4), {0: [running], 1: [big, small]})

    admitted = [item.seq.seq_id for b in batches for item in b.items if item.start_pos == 0]
    assert admitted == [0, 1, 2]
    first_step = [next(i for i, b in enumerate(batches) if s in b.seqs) for s in (big, small)]
    assert first_step == [4, 4]  # both once `running` finished (4 tokens), not small earlier


def test_max_num_seqs_caps_running_and_a_freed_slot_is_reused_at_once():
    scheduler = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64)
    seqs = [make_seq(i, [i, i + 1], max_tokens=t) for i, t in enumerate([6, 2, 3, 2])]
    batches = run(scheduler, FakeModel(4), {0: seqs})

    assert max(b.num_seqs for b in batches) == 2
    # seq 1 finishes at step 1 (prefill token + one decode); seq 2 is admitted at step 2
    assert [s.seq_id for s in batches[2].seqs] == [0, 2]
    assert batches[2].items[1].is_prefill


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_preemption_by_recompute_gives_the_same_tokens_as_without_pressure(prefix_caching):
    rng = random.Random(1)
    specs = [(random_prompt(rng, rng.randint(5, 14)), rng.randint(8, 16)) for _ in range(6)]

    def generate(num_blocks):
        scheduler = make_scheduler(
            num_blocks, prefix=prefix_caching, max_num_seqs=6, max_num_batched_tokens=32
        )
        seqs = [make_seq(i, p, m) for i, (p, m) in enumerate(specs)]
        run(scheduler, FakeModel(4), {0: seqs})
        assert scheduler.block_manager.num_free_blocks == num_blocks
        return scheduler, seqs

    relaxed, relaxed_seqs = generate(num_blocks=200)
    tight, tight_seqs = generate(num_blocks=10)  # every sequence fits alone, not all at once

    assert relaxed.num_preemptions == 0
    assert tight.num_preemptions > 0
    assert any(seq.num_preemptions for seq in tight_seqs)
    for relaxed_seq, tight_seq, (prompt, max_tokens) in zip(
        relaxed_seqs, tight_seqs, specs, strict=True
    ):
        assert tight_seq.generated_token_ids == relaxed_seq.generated_token_ids
        assert tight_seq.generated_token_ids == reference(prompt, max_tokens)


def test_preemption_picks_the_newest_and_requeues_it_first_with_its_tokens():
    scheduler = make_scheduler(num_blocks=6, max_num_seqs=4, max_num_batched_tokens=64)
    model = FakeModel(4)
    old, new = (
        make_seq(0, list(range(8)), max_tokens=20),
        make_seq(1, list(range(8)), max_tokens=20),
    )
    scheduler.add(old)
    scheduler.add(new)
    preempted = None
    for _ in range(20):
        batch = scheduler.schedule()
        if batch.preempted:
            preempted = batch
            break
        scheduler.postprocess(batch, model.step(batch))

    assert preempted is not None and preempted.preempted == [new]
    assert new.status is SequenceStatus.PREEMPTED and scheduler.waiting[0] is new
    assert new.block_table == [] and new.num_computed_tokens == 0
    assert new.num_generated_tokens > 0  # keeps what it generated; re-prefills all of it
    assert [item.seq for item in preempted.items] == [old]


def test_abort_frees_every_block_wherever_the_sequence_is():
    scheduler = make_scheduler(
        num_blocks=40, prefix=True, max_num_seqs=4, max_num_batched_tokens=12
    )
    model = FakeModel(4)
    decoding, chunking, waiting = (
        make_seq(0, [1, 2, 3], max_tokens=50),
        make_seq(1, list(range(40)), max_tokens=50),
        make_seq(2, [9] * 30, max_tokens=50),
    )
    for seq in (decoding, chunking, waiting):
        scheduler.add(seq)
    for _ in range(2):
        batch = scheduler.schedule()
        scheduler.postprocess(batch, model.step(batch))
    assert decoding.is_prefill_done and not chunking.is_prefill_done
    assert waiting.status is SequenceStatus.WAITING

    pending = scheduler.schedule()
    outputs = model.step(pending)  # the aborts land between the forward and postprocess()
    for seq in (chunking, waiting, decoding):
        assert scheduler.abort(seq.seq_id) is seq
        assert seq.status is SequenceStatus.ABORTED and seq.block_table == []
    scheduler.postprocess(pending, outputs)

    assert scheduler.abort(99) is None
    assert not scheduler.has_unfinished()
    assert scheduler.block_manager.num_free_blocks == 40
    assert scheduler.block_manager.stats()["allocated_blocks"] == 0


def test_prefix_hits_reduce_the_prefill_tokens_scheduled():
    scheduler = make_scheduler(
        num_blocks=64, prefix=True, max_num_seqs=4, max_num_batched_tokens=64
    )
    model = FakeModel(4)
    system = list(range(200, 216))  # 4 full blocks shared by both requests
    first = make_seq(0, [*system, 1, 2, 3, 4, 5], max_tokens=3)
    second = make_seq(1, [*system, 9, 8, 7], max_tokens=3)
    run(scheduler, model, {0: [first]})

    scheduler.add(second)
    batch = scheduler.schedule()
    (item,) = batch.items
    assert second.num_cached_tokens == 16
    assert (item.start_pos, item.num_new_tokens) == (16, 3)
    assert batch.num_prefill_tokens == 3  # not 19
    scheduler.postprocess(batch, model.step(batch))
    run(scheduler, model)
    assert second.generated_token_ids == reference(second.token_ids[:19], 3)
    assert scheduler.block_manager.stats()["prefix_hits"] >= 4


def test_prefix_hits_on_blocks_left_without_kv_are_recomputed():
    # The first request is aborted mid-prefill: its hashed blocks stay findable in the
    # prefix cache although only the first chunk's KV was ever computed.
    scheduler = make_scheduler(num_blocks=64, prefix=True, max_num_seqs=4, max_num_batched_tokens=8)
    model = FakeModel(4)
    prompt = list(range(300, 332))
    aborted = make_seq(0, prompt, max_tokens=2)
    scheduler.add(aborted)
    scheduler.postprocess(batch := scheduler.schedule(), model.step(batch))
    scheduler.abort(0)

    again = make_seq(1, prompt, max_tokens=2)
    scheduler.add(again)
    batch = scheduler.schedule()

    assert again.num_cached_tokens > 8  # the manager reports hits past the computed chunk ...
    assert batch.items[0].start_pos == 8  # ... the scheduler resumes where KV really ends
    scheduler.postprocess(batch, model.step(batch))
    run(scheduler, model)
    assert again.generated_token_ids == reference(prompt, 2)


def test_a_fully_cached_prompt_still_computes_its_last_token():
    scheduler = make_scheduler(
        num_blocks=64, prefix=True, max_num_seqs=4, max_num_batched_tokens=64
    )
    model = FakeModel(4)
    prompt = list(range(50, 66))  # exactly 4 blocks
    run(scheduler, model, {0: [make_seq(0, prompt, max_tokens=2)]})
    repeat = make_seq(1, prompt, max_tokens=2)
    scheduler.add(repeat)
    batch = scheduler.schedule()
    (item,) = batch.items
    assert 0 < item.start_pos < 16 and item.start_pos == repeat.num_cached_tokens
    assert item.emits_token and item.is_prefill
    scheduler.postprocess(batch, model.step(batch))
    run(scheduler, model)
    assert repeat.generated_token_ids == reference(prompt, 2)


def test_without_chunking_a_prompt_waits_for_a_step_with_room_for_all_of_it():
    scheduler = make_scheduler(
        max_num_seqs=4, max_num_batched_tokens=16, enable_chunked_prefill=False
    )
    model = FakeModel(4)
    fits, full = make_seq(0, [1] * 10, 4), make_seq(1, [2] * 16, 2)
    batches = run(scheduler, model, {0: [fits], 1: [full]})
    for batch in batches:
        assert batch.num_batched_tokens <= 16
        assert all(item.emits_token for item in batch.items)  # no partial prefills
    # 1 decode + 16 prompt tokens exceed the budget: the prompt waits for the decode to end
    assert [b.seqs for b in batches[:5]] == [[fits]] * 4 + [[full]]
    assert full.generated_token_ids == reference([2] * 16, 2)


def test_scheduler_runs_on_the_contiguous_allocator():
    allocator = ContiguousAllocator(max_seqs=2, max_model_len=32)
    scheduler = Scheduler(
        allocator, max_num_seqs=4, max_num_batched_tokens=16, is_finished=reached_max_tokens
    )
    seqs = [make_seq(i, [i] * 12, 4) for i in range(3)]
    batches = run(scheduler, FakeModel(32), {0: seqs})
    assert max(b.num_seqs for b in batches) == 2  # two regions: the third waits
    assert all(s.generated_token_ids == reference([s.seq_id] * 12, 4) for s in seqs)


def test_postprocess_demands_a_token_where_one_is_due_and_a_stop_rule():
    scheduler = make_scheduler()
    scheduler.add(make_seq(0, [1, 2], 3))
    batch = scheduler.schedule()
    with pytest.raises(ValueError, match="sampled"):
        scheduler.postprocess(batch, {0: None})
    no_rule = Scheduler(BlockManager(8, 4))
    with pytest.raises(ValueError, match="is_finished"):
        no_rule.postprocess(ScheduledBatch(), {})


def test_a_prompt_larger_than_the_pool_is_reported():
    scheduler = make_scheduler(num_blocks=2)
    scheduler.add(make_seq(0, list(range(20)), 1))
    with pytest.raises(RuntimeError, match="more KV blocks"):
        scheduler.schedule()


def test_static_batch_runs_until_its_longest_member_finishes_and_counts_wasted_slots():
    manager = BlockManager(64, 4, enable_prefix_caching=False)
    static = StaticScheduler(manager, batch_size=2, is_finished=reached_max_tokens)
    model = FakeModel(4)
    long, short, late = make_seq(0, [1, 2], 8), make_seq(1, [3, 4], 2), make_seq(2, [5, 6], 2)

    static.add(long)
    assert static.schedule().is_empty  # waits for a full batch
    static.add(short)
    static.add(late)
    static.flush = True  # no more arrivals: the last, partial batch may start
    batches = []
    while static.has_unfinished():
        batch = static.schedule()
        batches.append(batch)
        static.postprocess(batch, model.step(batch))

    first_batch_steps = [b for b in batches if late not in b.seqs]
    assert len(first_batch_steps) == 8  # the longest member (8 tokens) sets the pace
    assert all(b.num_seqs == 1 for b in batches[8:])  # late was admitted only then
    assert short.num_generated_tokens == 2 and short.finish_time is not None
    assert static.slot_steps_wasted == 6  # short sat finished in its slot for 6 steps
    assert static.slot_steps_total == 2 * 8 + 2
    assert static.num_batches == 2
    assert manager.num_free_blocks == 64
    assert [s.generated_token_ids for s in (long, short, late)] == [
        reference([1, 2], 8),
        reference([3, 4], 2),
        reference([5, 6], 2),
    ]

    # continuous batching with the same two slots admits `late` as soon as `short` is done
    continuous = make_scheduler(max_num_seqs=2, max_num_batched_tokens=16)
    again = [make_seq(0, [1, 2], 8), make_seq(1, [3, 4], 2), make_seq(2, [5, 6], 2)]
    batches = run(continuous, FakeModel(4), {0: again})
    admitted_at = next(i for i, b in enumerate(batches) if again[2] in b.seqs)
    assert admitted_at == 2 and len(batches) == 8


def test_static_abort_frees_the_member_at_once_and_ends_a_batch_of_aborted():
    manager = BlockManager(32, 4, enable_prefix_caching=False)
    static = StaticScheduler(manager, batch_size=2, is_finished=reached_max_tokens)
    model = FakeModel(4)
    a, b = make_seq(0, list(range(10)), 5), make_seq(1, list(range(6)), 5)
    static.add(a)
    static.add(b)
    static.postprocess(batch := static.schedule(), model.step(batch))
    held = manager.num_free_blocks
    static.abort(1)
    assert manager.num_free_blocks == held + 2 and b.block_table == []
    static.abort(0)
    assert manager.num_free_blocks == 32 and not static.has_unfinished()
    static.flush = True
    assert static.schedule().is_empty and static.num_batches == 1  # nothing left to batch
