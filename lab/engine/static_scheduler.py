"""Static batching, the contrast to continuous batching: a batch runs to its end."""

from __future__ import annotations

import time
from collections.abc import Callable

from lab.engine.batch import ScheduledBatch, ScheduledSeq
from lab.engine.scheduler import BaseScheduler, BlockManagerLike, IsFinished
from lab.engine.sequence import Sequence, SequenceStatus


class StaticScheduler(BaseScheduler):
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
