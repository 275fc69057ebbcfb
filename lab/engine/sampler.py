"""Sampling: SamplingParams and logits -> next token (greedy, temperature, top-k, top-p).

Each request draws from its own torch.Generator seeded from `params.seed`, so a seeded
request samples the same tokens whatever else shares its batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS


@dataclass(frozen=True)
class SamplingParams:
    """How one request picks tokens and when it stops.

    temperature: 0 (or below 1e-5) means greedy (argmax); otherwise logits are divided by it.
    top_k: keep the k most likely tokens (0 = all). top_p: keep the smallest set of tokens
    whose probability reaches p (1.0 = all). seed: per-request RNG seed (None = random).
    max_tokens: generated tokens at most. stop_token_ids: extra ids that end the request.
    ignore_eos: keep generating past the model's end-of-sequence token (benchmarks).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 16
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        # Accept a list for convenience; store a tuple so params stay hashable.
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(
                f"temperature must be a finite number >= 0 (0 means greedy); "
                f"got {self.temperature}."
            )
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 keeps every token); got {self.top_k}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1] (1 keeps every token); got {self.top_p}.")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1; got {self.max_tokens}.")

    @property
    def greedy(self) -> bool:
        """True when the next token is the argmax: temperature 0, or below GREEDY_BELOW (as
        vLLM): dividing logits by a subnormal temperature overflows to inf and NaN."""
        return self.temperature < GREEDY_BELOW


def make_generator(params: SamplingParams, device: str | torch.device) -> torch.Generator | None:
    """A generator on `device` seeded from params.seed; None for greedy or unseeded requests
    (those use torch's global RNG)."""
    if params.greedy or params.seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(params.seed)
    return generator


def probabilities(logits: Tensor, params: SamplingParams) -> Tensor:
    """The distribution a request samples from: logits [..., vocab] -> float32 probs.

    Temperature, then top-k, then top-p (as vLLM and HF order them). Greedy returns the
    one-hot of the argmax, so speculative decoding can treat both cases alike.
    """
    logits = logits.float()
    if params.greedy:
        one_hot = torch.zeros_like(logits)
        return one_hot.scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        logits = _keep_top_k(logits, params.top_k)
    if params.top_p < 1:
        logits = _keep_top_p(logits, params.top_p)
    return torch.softmax(logits, dim=-1)


def _keep_top_k(logits: Tensor, k: int) -> Tensor:
    """Mask every logit below the k-th largest (ties with it survive)."""
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, -math.inf)


def _keep_top_p(logits: Tensor, p: float) -> Tensor:
    """Keep the most likely tokens until their mass reaches p; the top token always stays."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    sorted_probs = sorted_logits.softmax(dim=-1)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    drop_sorted = mass_before >= p
    drop_sorted[..., 0] = False  # a p below float32's range compares as 0.0 and would drop it too
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, -math.inf)


def sample(
    logits: Tensor,
    params_list: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
) -> Tensor:
    """Next token per row: logits [B, vocab] -> LongTensor [B] on logits' device.

    Row i follows params_list[i] and draws with generators[i] (see make_generator).
    """
    if not len(params_list) == len(generators) == logits.shape[0]:
        raise ValueError(
            f"sample got {logits.shape[0]} logit rows, {len(params_list)} params and "
            f"{len(generators)} generators; pass one of each per row."
        )
    tokens = logits.argmax(dim=-1)  # greedy rows are done in one batched op
    for row, (params, generator) in enumerate(zip(params_list, generators, strict=True)):
        if not params.greedy:
            probs = probabilities(logits[row], params)
            tokens[row] = torch.multinomial(probs, 1, generator=generator)[0]
    return tokens
