"""A request's state: its tokens, how far its KV has been computed, and its block table."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


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
