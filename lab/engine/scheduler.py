"""Request scheduling: continuous batching (iteration level) and a static-batching contrast.

One ``schedule()`` call plans one engine step: which sequences run, how many new tokens each
computes and from which position. ``postprocess()`` applies the sampled tokens. This is pure
bookkeeping; the KV blocks themselves belong to ``kv_cache.BlockManager`` (duck-typed here).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"  # waiting again, to recompute its KV from scratch
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)  # identity equality: a sequence is a live object, not a value
class Sequence:
    """One request: its tokens, its progress and its KV block table.

    ``token_ids`` is prompt + generated tokens. ``num_computed_tokens`` counts the leading
    tokens whose KV is in the cache; a step computes ``token_ids[num_computed_tokens:]`` (or a
    chunk of it) and, once all of them are computed, the engine samples one new token from the
    last position. ``num_prefill_tokens`` is what the current prefill must cover: the prompt,
    or prompt + generated after a preemption. Timestamps are seconds on the scheduler's clock.
    """

    seq_id: int
    token_ids: list[int]
    num_prompt_tokens: int = -1  # -1: the whole of token_ids is prompt
    sampling_params: Any = None  # opaque to the scheduler; the engine's sampler reads it
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at allocation
    num_computed_tokens: int = 0
    num_prefill_tokens: int = -1
    num_preemptions: int = 0
    arrival_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None

    def __post_init__(self) -> None:
        self.token_ids = list(self.token_ids)
        if not self.token_ids:
            raise ValueError(f"Sequence {self.seq_id} has no tokens; give it a prompt.")
        if self.num_prompt_tokens < 0:
            self.num_prompt_tokens = len(self.token_ids)
        if self.num_prefill_tokens < 0:
            self.num_prefill_tokens = self.num_prompt_tokens

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def generated_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def last_token(self) -> int:
        return self.token_ids[-1]

    @property
    def is_prefill_done(self) -> bool:
        return self.num_computed_tokens >= self.num_prefill_tokens

    @property
    def is_done(self) -> bool:
        return self.status in (SequenceStatus.FINISHED, SequenceStatus.ABORTED)

    @property
    def num_new_tokens_to_compute(self) -> int:
        """Tokens whose KV is still missing: the prefill remainder, or 1 when decoding."""
        return len(self.token_ids) - self.num_computed_tokens


@dataclass(frozen=True)
class ScheduledSeq:
    """One sequence's share of a step: compute ``num_new_tokens`` from ``start_pos``."""

    seq: Sequence
    start_pos: int  # == tokens whose KV is already cached for this sequence
    num_new_tokens: int
    is_prefill: bool
    emits_token: bool  # computes the last token: the engine samples from its row

    @classmethod
    def plan(cls, seq: Sequence, num_new_tokens: int) -> ScheduledSeq:
        """``num_new_tokens`` of ``seq`` from where its cached KV ends."""
        start = seq.num_computed_tokens
        emits = start + num_new_tokens == seq.num_tokens
        return cls(seq, start, num_new_tokens, not seq.is_prefill_done, emits)

    @property
    def input_ids(self) -> list[int]:
        return self.seq.token_ids[self.start_pos : self.start_pos + self.num_new_tokens]

    @property
    def positions(self) -> range:
        return range(self.start_pos, self.start_pos + self.num_new_tokens)


@dataclass
class ScheduledBatch:
    """The plan of one step, in the order the engine concatenates the new tokens."""

    items: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def seqs(self) -> list[Sequence]:
        return [item.seq for item in self.items]

    @property
    def num_seqs(self) -> int:
        return len(self.items)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.items if item.is_prefill)

    @property
    def num_decode_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.items if not item.is_prefill)

    @property
    def num_batched_tokens(self) -> int:
        return sum(item.num_new_tokens for item in self.items)

    @property
    def is_empty(self) -> bool:
        return not self.items


class BlockManagerLike(Protocol):
    """The part of ``kv_cache.BlockManager`` the schedulers use (see docs/ENGINE.md)."""

    block_size: int

    def can_allocate(self, seq: Sequence) -> bool: ...
    def allocate(self, seq: Sequence) -> None: ...
    def can_append(self, seq: Sequence) -> bool: ...
    def append_slot(self, seq: Sequence) -> None: ...
    def free(self, seq: Sequence) -> None: ...


IsFinished = Callable[[Sequence], bool]


class _BaseScheduler:
    """Queues, token application and abort: what both scheduling policies share."""

    def __init__(
        self,
        block_manager: BlockManagerLike,
        is_finished: IsFinished | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.block_manager = block_manager
        self.is_finished = is_finished
        self.clock = clock
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        """Queue a new request (FCFS); stamps ``arrival_time`` if the engine has not."""
        if seq.arrival_time is None:
            seq.arrival_time = self.clock()
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or bool(self.running)

    def _release(self, seq: Sequence) -> None:
        # free before resetting progress, so the manager may still read how far KV got
        self.block_manager.free(seq)
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_cached_tokens = 0

    def abort(self, seq_id: int) -> Sequence | None:
        """Drop a request wherever it is; its KV blocks are freed at once. None if unknown."""
        for seq in [*self.waiting, *self.running]:
            if seq.seq_id == seq_id and not seq.is_done:
                if seq in self.waiting:
                    self.waiting.remove(seq)
                else:
                    self._drop_running(seq)
                seq.status = SequenceStatus.ABORTED
                seq.finish_time = self.clock()
                return seq
        return None

    def _drop_running(self, seq: Sequence) -> None:
        raise NotImplementedError

    def _apply(self, item: ScheduledSeq, token: int | None, check: IsFinished) -> bool:
        """Advance one sequence by its step; returns True if it finished now."""
        seq = item.seq
        if seq.is_done:  # aborted between schedule() and postprocess()
            return False
        seq.num_computed_tokens = item.start_pos + item.num_new_tokens
        if not item.emits_token:  # mid-prefill: nothing to emit (a token passed is ignored)
            return False
        if token is None:
            raise ValueError(
                f"Sequence {seq.seq_id} computed its last token this step; "
                "pass the token sampled from its last row in new_tokens."
            )
        seq.token_ids.append(int(token))
        if seq.first_token_time is None:
            seq.first_token_time = self.clock()
        if not check(seq):
            return False
        seq.status = SequenceStatus.FINISHED
        seq.finish_time = self.clock()
        return True

    def _finish_check(self, is_finished: IsFinished | None) -> IsFinished:
        check = is_finished or self.is_finished
        if check is None:
            raise ValueError(
                "No stop rule: pass is_finished(seq) -> bool to the scheduler or postprocess()."
            )
        return check


class Scheduler(_BaseScheduler):
    """Continuous batching: decode-first, token budget, chunked prefill, preempt-by-recompute.

    ``max_num_batched_tokens`` caps the new tokens of one step (prefill + decode);
    ``max_num_seqs`` caps the running sequences (those holding KV blocks).
    """

    def __init__(
        self,
        block_manager: BlockManagerLike,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 512,
        enable_chunked_prefill: bool = True,
        *,
        is_finished: IsFinished | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_num_batched_tokens < max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({max_num_seqs}) so every running sequence can decode each step."
            )
        super().__init__(block_manager, is_finished, clock)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.num_preemptions = 0
        self._order: dict[int, int] = {}  # seq_id -> arrival rank (preemption victim choice)
        self._stale_blocks: set[int] = set()  # hashed blocks freed before their KV was computed
        self._block_size: int | None = getattr(block_manager, "block_size", None)

    def add(self, seq: Sequence) -> None:
        self._order[seq.seq_id] = len(self._order)
        super().add(seq)

    def schedule(self) -> ScheduledBatch:
        """Plan one step: every decode first, then prefills (running chunks, then FCFS)."""
        batch = ScheduledBatch()
        self._schedule_decodes(batch)
        budget = self.max_num_batched_tokens - batch.num_decode_tokens
        budget = self._schedule_running_prefills(batch, budget)
        if not batch.preempted:  # admitting while evicting would only thrash
            self._schedule_waiting(batch, budget)
        return batch

    def _schedule_decodes(self, batch: ScheduledBatch) -> None:
        # oldest first, so a victim (the newest) is never one already scheduled
        for seq in sorted(self.running, key=self._rank):
            if not seq.is_prefill_done or seq.status is not SequenceStatus.RUNNING:
                continue
            while not self.block_manager.can_append(seq):
                victim = max(self.running, key=self._rank)
                self._preempt(victim, batch)
                if victim is seq:
                    break
            else:
                self.block_manager.append_slot(seq)
                batch.items.append(ScheduledSeq.plan(seq, 1))

    def _schedule_running_prefills(self, batch: ScheduledBatch, budget: int) -> int:
        for seq in sorted(self.running, key=self._rank):
            if budget <= 0:
                break
            if not seq.is_prefill_done:
                num_new = min(seq.num_new_tokens_to_compute, budget)
                batch.items.append(ScheduledSeq.plan(seq, num_new))
                budget -= num_new
        return budget

    def _schedule_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            fits_whole = seq.num_tokens <= budget or batch.is_empty
            if not self.enable_chunked_prefill and not fits_whole:
                break
            if not self.block_manager.can_allocate(seq):
                if not self.running:
                    raise RuntimeError(
                        f"Sequence {seq.seq_id} ({seq.num_tokens} tokens) needs more KV blocks "
                        "than the pool can free; give the BlockManager more blocks or cap "
                        "the prompt and max_tokens."
                    )
                break  # FCFS: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            seq.num_prefill_tokens = seq.num_tokens
            seq.num_computed_tokens = self._usable_prefix(seq)
            seq.status = SequenceStatus.RUNNING
            num_new = seq.num_new_tokens_to_compute
            if self.enable_chunked_prefill:
                num_new = min(num_new, budget)
            batch.items.append(ScheduledSeq.plan(seq, num_new))
            self.running.append(seq)
            budget -= num_new

    def _usable_prefix(self, seq: Sequence) -> int:
        """Leading prefix-hit tokens whose KV really is in the cache (may be < the hits).

        The BlockManager hashes a block as soon as its tokens are known, before its KV exists.
        A running owner computes such blocks in the very step that admits ``seq`` (admission
        happens only once every running prefill fits in the step, and the backend stores a
        step's K/V before attending), but an owner preempted or aborted mid-prefill leaves
        hashed blocks without KV: from the first of those on, ``seq`` recomputes. The last
        token is always computed: its row gives the logits.
        """
        hit = max(0, min(seq.num_cached_tokens, seq.num_tokens - 1))
        if not hit or not self._stale_blocks or not self._block_size:
            return hit
        num_hit_blocks = -(-hit // self._block_size)
        for index, block in enumerate(seq.block_table[:num_hit_blocks]):
            if block in self._stale_blocks:
                return index * self._block_size
        return hit

    def _preempt(self, seq: Sequence, batch: ScheduledBatch) -> None:
        """Preempt by recompute: drop the KV, keep the tokens, requeue at the front."""
        self._mark_stale(seq)
        self.running.remove(seq)
        self._release(seq)
        seq.status = SequenceStatus.PREEMPTED
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        batch.preempted.append(seq)

    def _mark_stale(self, seq: Sequence) -> None:
        if self._block_size:
            first_incomplete = seq.num_computed_tokens // self._block_size
            self._stale_blocks.update(seq.block_table[first_incomplete:])

    def _rank(self, seq: Sequence) -> int:
        return self._order.get(seq.seq_id, -1)

    def postprocess(
        self,
        batch: ScheduledBatch,
        new_tokens: dict[int, int | None],
        is_finished: IsFinished | None = None,
    ) -> list[Sequence]:
        """Apply one step's sampled tokens (None: still mid-prefill); returns the finished."""
        check = self._finish_check(is_finished)
        finished = []
        for item in batch.items:
            if self._apply(item, new_tokens.get(item.seq.seq_id), check):
                finished.append(item.seq)
            if self._stale_blocks and self._block_size:  # blocks filled now hold valid KV
                first, end = item.start_pos, item.start_pos + item.num_new_tokens
                filled = item.seq.block_table[first // self._block_size : end // self._block_size]
                self._stale_blocks.difference_update(filled)
        for seq in finished:
            self.running.remove(seq)
            self._release(seq)
            del self._order[seq.seq_id]
        return finished

    def abort(self, seq_id: int) -> Sequence | None:
        """Drop a request wherever it is; its KV blocks are freed at once. None if unknown."""
        seq = super().abort(seq_id)
        if seq is not None:
            del self._order[seq_id]
        return seq

    def _drop_running(self, seq: Sequence) -> None:
        self._mark_stale(seq)
        self.running.remove(seq)
        self._release(seq)


class StaticScheduler(_BaseScheduler):
    """Static batching, as in pre-Orca servers or HF ``generate``: a batch runs to the end.

    Waits until ``batch_size`` requests are waiting (or ``flush`` is set), admits them
    together, prefills them whole in one step, then decodes until *all* of them finish.
    A finished member keeps its slot (and KV) until then: ``slot_steps_wasted`` counts those.
    """

    def __init__(
        self,
        block_manager: BlockManagerLike,
        batch_size: int = 8,
        *,
        flush: bool = False,
        is_finished: IsFinished | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(block_manager, is_finished, clock)
        self.batch_size = batch_size
        self.flush = flush
        self.num_batches = 0
        self.slot_steps_total = 0  # batch members x steps run
        self.slot_steps_wasted = 0  # ... of which the member had already finished

    def has_unfinished(self) -> bool:
        return bool(self.waiting) or any(not seq.is_done for seq in self.running)

    def schedule(self, flush: bool | None = None) -> ScheduledBatch:
        """Plan one step; empty while the batch is filling and ``flush`` is not set."""
        flush = self.flush if flush is None else flush
        if not self.running and (len(self.waiting) >= self.batch_size or flush):
            self._admit_batch()
        batch = ScheduledBatch()
        for seq in self.running:
            if seq.is_done:
                continue
            if seq.is_prefill_done:
                self._reserve_decode_slot(seq)
            num_new = seq.num_new_tokens_to_compute
            batch.items.append(ScheduledSeq.plan(seq, num_new))
        if not batch.is_empty:
            self.slot_steps_total += len(self.running)
            self.slot_steps_wasted += sum(seq.is_done for seq in self.running)
        return batch

    def _admit_batch(self) -> None:
        while self.waiting and len(self.running) < self.batch_size:
            seq = self.waiting[0]
            if not self.block_manager.can_allocate(seq):
                if not self.running:
                    raise RuntimeError(
                        f"Sequence {seq.seq_id} needs more KV blocks than the pool holds; "
                        "give the BlockManager more blocks."
                    )
                break  # a smaller batch, as a server that sizes batches by memory would
            self.waiting.popleft()
            self.block_manager.allocate(seq)
            seq.num_prefill_tokens = seq.num_tokens
            seq.num_computed_tokens = 0  # static servers have no prefix cache: recompute
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
        self.num_batches += bool(self.running)

    def _reserve_decode_slot(self, seq: Sequence) -> None:
        if not self.block_manager.can_append(seq):
            raise RuntimeError(
                f"The static batch ran out of KV blocks at sequence {seq.seq_id}; static "
                "batching cannot preempt: give the pool more blocks or lower batch_size."
            )
        self.block_manager.append_slot(seq)

    def postprocess(
        self,
        batch: ScheduledBatch,
        new_tokens: dict[int, int | None],
        is_finished: IsFinished | None = None,
    ) -> list[Sequence]:
        """Apply sampled tokens; the batch (and its KV) is released when all members finish."""
        check = self._finish_check(is_finished)
        finished = [
            item.seq
            for item in batch.items
            if self._apply(item, new_tokens.get(item.seq.seq_id), check)
        ]
        self._end_batch_if_done()
        return finished

    def abort(self, seq_id: int) -> Sequence | None:
        """Drop a request; a batch member's blocks are freed at once, its slot stays taken."""
        seq = super().abort(seq_id)
        self._end_batch_if_done()
        return seq

    def _drop_running(self, seq: Sequence) -> None:
        self._release(seq)

    def _end_batch_if_done(self) -> None:
        if self.running and all(seq.is_done for seq in self.running):
            for seq in self.running:
                if seq.block_table:
                    self._release(seq)
            self.running = []
