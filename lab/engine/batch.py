"""The plan of one engine step: which sequences run and which of their tokens are computed.

The scheduler produces a ``ScheduledBatch``; the model runner turns it into model inputs and
the scheduler's ``postprocess()`` applies the sampled tokens to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.engine.sequence import Sequence


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
