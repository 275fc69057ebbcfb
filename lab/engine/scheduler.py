"""Continuous batching (iteration-level scheduling), and the base both schedulers share.

One ``schedule()`` call plans one engine step: which sequences run, how many new tokens each
computes and from which position. ``postprocess()`` applies the sampled tokens. This is pure
bookkeeping; the KV blocks themselves belong to a block manager (``block_manager.py``,
duck-typed here). The static-batching contrast is ``static_scheduler.py``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from lab.engine.batch import ScheduledBatch, ScheduledSeq
from lab.engine.sequence import Sequence, SequenceStatus


class BlockManagerLike(Protocol):
    """What the schedulers need of a KV block manager: ``BlockManager`` and
    ``ContiguousAllocator`` both provide it (see docs/ENGINE.md)."""

    block_size: int

    def can_allocate(self, seq: Sequence) -> bool: ...
    def allocate(self, seq: Sequence) -> None: ...
    def can_append(self, seq: Sequence) -> bool: ...
    def append_slot(self, seq: Sequence) -> None: ...
    def free(self, seq: Sequence) -> None: ...


IsFinished = Callable[[Sequence], bool]


class BaseScheduler:
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


class Scheduler(BaseScheduler):
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

    def add_running(self, seq: Sequence) -> None:
        """Take a sequence that already holds its blocks and computed KV (its prefill ran on
        another engine): it decodes from the next step on."""
        self._order[seq.seq_id] = len(self._order)
        self.running.append(seq)

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
