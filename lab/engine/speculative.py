"""Speculative decoding: a small draft model proposes k tokens, the target checks them all
in one forward pass and keeps the longest acceptable prefix plus one token of its own.

gpt-fast style plain functions (`accept_greedy`, `accept_sampled`, `forward_rows`) and
`SpeculativeDecoder`, which runs many sequences at once (gpt-fast does batch 1). Greedy
output is identical to the target's own greedy output; sampled output follows the target's
distribution exactly (Leviathan et al. 2023; Chen et al. 2023): accept draft token x with
probability min(1, p(x) / q(x)), otherwise sample from norm(max(0, p - q)); when all k are
accepted, a bonus token comes from p.

Each model has its own KV cache, one max_model_len region per sequence slot (`SlotAttention`:
writes and reads are slices of that region, so a pass builds no block tables or gather
indices). A sequence's history is only `num_cached_tokens`, so rolling back rejected tokens
is free: the next pass writes over them. The cost model (speculative_cost.py) and where this
code's real speedup stands against it: docs/ENGINE.md, "Speculative decoding".
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import torch
from torch import Tensor

from lab.engine.kv_pool import KVPool
from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams, make_generator, probabilities
from lab.engine.slot_attention import SlotAttention


def accept_greedy(draft_tokens: Seq[int], target_tokens: Seq[int]) -> list[int]:
    """Greedy verification. target_tokens: the target's argmax at each of the k + 1 positions.

    Returns the emitted tokens: the drafts up to the first mismatch, then the target's token
    there (or the bonus token when all k match). Accepted drafts = len(result) - 1.
    """
    accepted = 0
    while accepted < len(draft_tokens) and draft_tokens[accepted] == target_tokens[accepted]:
        accepted += 1
    return list(target_tokens[: accepted + 1])


def accept_sampled(
    draft_tokens: Tensor,
    draft_probs: Tensor,
    target_probs: Tensor,
    generator: torch.Generator | None = None,
) -> list[int]:
    """Rejection sampling: draft_tokens [k] drawn from draft_probs [k, vocab]; target_probs
    [k + 1, vocab]. Returns the emitted tokens (accepted drafts + one more), distributed as
    if drawn from target_probs one by one. Accepted drafts = len(result) - 1.

    Draws k uniforms and one multinomial from `generator`, whatever is accepted, so a
    seeded request stays reproducible. One host sync.
    """
    k = draft_tokens.shape[0]
    rows = torch.arange(k, device=draft_probs.device)
    p = target_probs[rows, draft_tokens]
    q = draft_probs[rows, draft_tokens]
    u = torch.rand(k, generator=generator, device=draft_probs.device)
    accept = u * q < p  # u < p / q without dividing; q(x) > 0 for a sampled x
    num_accepted = accept.long().cumprod(0).sum()
    residual = (target_probs[:k] - draft_probs).clamp_min(0)
    # p == q leaves no residual (rejection then has probability ~0): fall back to p.
    empty = residual.sum(-1, keepdim=True) <= 0
    residual = torch.where(empty, target_probs[:k], residual)
    weights = torch.cat((residual, target_probs[k:]))[num_accepted]
    last = torch.multinomial(weights, 1, generator=generator)
    out = torch.cat((draft_tokens.to(last.device), last, num_accepted.view(1))).tolist()
    return [*out[: out[-1]], out[k]]


def forward_rows(
    model: LlamaModel,
    kv: Tensor,
    slots: Seq[int],
    num_cached_tokens: Seq[int],
    new_tokens: Seq[Seq[int]],
    num_rows: Seq[int],
) -> Tensor:
    """One forward pass over each sequence's new tokens (their K/V are written to its slot of
    `kv`, see SlotAttention). Returns logits of the last num_rows[i] new tokens of every
    sequence, concatenated in order: [sum(num_rows), vocab]."""
    device = model.device
    num_new = [len(t) for t in new_tokens]
    ids = [t for tokens in new_tokens for t in tokens]
    positions = [c + j for c, n in zip(num_cached_tokens, num_new, strict=True) for j in range(n)]
    backend = SlotAttention(kv, slots, num_cached_tokens, num_new)
    hidden = model(
        torch.tensor(ids, dtype=torch.long, device=device),
        torch.tensor(positions, dtype=torch.long, device=device),
        backend,
    )
    if len(num_new) == 1:  # one sequence: its last rows are a slice, no index tensor
        return model.logits(hidden[-num_rows[0] :])
    ends = itertools.accumulate(num_new)
    rows = [r for end, n in zip(ends, num_rows, strict=True) for r in range(end - n, end)]
    return model.logits(hidden[torch.tensor(rows, dtype=torch.long, device=device)])


@dataclass
class SpecResult:
    """Tokens per sequence and what the speculation cost and gained.

    rounds: target forward passes. seq_rounds: (sequence, round) pairs, i.e. verifications.
    draft_passes: draft forward passes. proposed / accepted: draft tokens, all sequences.
    emitted: tokens output, all sequences. wall_s: seconds for the whole generate().
    """

    tokens: list[list[int]]
    rounds: int = 0
    seq_rounds: int = 0
    draft_passes: int = 0
    proposed: int = 0
    accepted: int = 0
    emitted: int = 0
    wall_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        """alpha = accepted / proposed (nan when nothing was proposed)."""
        return self.accepted / self.proposed if self.proposed else math.nan

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens one sequence gains per target pass (emitted / seq_rounds); compare
        with expected_tokens_per_step(alpha, k). Equals emitted / rounds at batch 1."""
        return self.emitted / self.seq_rounds if self.seq_rounds else math.nan

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of wall clock, all sequences together."""
        return self.emitted / self.wall_s if self.wall_s else math.nan


@dataclass(eq=False)
class _Sequence:
    """A request's tokens and how many of them each model has valid K/V for."""

    slot: int
    token_ids: list[int]
    num_prompt_tokens: int
    params: SamplingParams
    generator: torch.Generator | None
    target_cached: int = 0
    draft_cached: int = 0
    done: bool = False

    @property
    def generated(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    def num_to_propose(self, k: int) -> int:
        """k, but never more than the tokens left after the target's own one."""
        return min(k, self.params.max_tokens - len(self.generated) - 1)


class SpeculativeDecoder:
    """Batched speculative decoding of `target` with `draft` (same vocabulary).

    k: draft tokens proposed per round (k = 0 is plain target decoding with the same
    machinery: the fair baseline). max_batch sequences of at most max_model_len tokens;
    each model's cache (a KVPool with one max_model_len "block" per slot) holds slot s at
    pool.kv[:, :, s]. device: where the caches live (default: the target's; both models
    must be there).
    """

    def __init__(
        self,
        target: LlamaModel,
        draft: LlamaModel,
        k: int = 4,
        max_model_len: int = 512,
        max_batch: int = 16,
        device: str | torch.device | None = None,
    ):
        if target.config.vocab_size != draft.config.vocab_size:
            raise ValueError(
                f"The draft's vocabulary ({draft.config.vocab_size}) differs from the "
                f"target's ({target.config.vocab_size}); pick a draft with the same tokenizer."
            )
        if k < 0:
            raise ValueError(f"k (draft tokens per round) must be >= 0; got {k}.")
        self.target, self.draft, self.k = target, draft, k
        self.max_model_len, self.max_batch = max_model_len, max_batch
        self.device = torch.device(device) if device is not None else target.device
        if not (
            _same_device(target.device, self.device) and _same_device(draft.device, self.device)
        ):
            raise ValueError(
                f"target ({target.device}), draft ({draft.device}) and the KV pools "
                f"({self.device}) must share one device; move the models with .to(device)."
            )
        self.eos_token_ids = tuple(target.config.eos_token_ids)
        self.target_pool, self.draft_pool = self._pool(target), self._pool(draft)

    def _pool(self, model: LlamaModel) -> KVPool:
        c = model.config
        return KVPool(
            c.num_hidden_layers,
            self.max_batch,
            self.max_model_len,
            c.num_key_value_heads,
            c.head_dim,
            model.dtype,
            self.device,
        )

    def generate(
        self, prompts: Seq[Seq[int]], params: SamplingParams | Seq[SamplingParams]
    ) -> SpecResult:
        """Run all prompts to completion together; finished sequences drop out of the batch."""
        plist = [params] * len(prompts) if isinstance(params, SamplingParams) else list(params)
        seqs = self._admit(prompts, plist)
        result = SpecResult(tokens=[])
        started = time.perf_counter()
        with torch.inference_mode():
            active = seqs
            while active:
                self._round(active, result)
                active = [s for s in active if not s.done]
        result.wall_s = time.perf_counter() - started
        result.tokens = [s.generated for s in seqs]
        return result

    def _admit(self, prompts: Seq[Seq[int]], plist: list[SamplingParams]) -> list[_Sequence]:
        if len(plist) != len(prompts):
            raise ValueError(f"Got {len(prompts)} prompts and {len(plist)} SamplingParams.")
        if len(prompts) > self.max_batch:
            raise ValueError(
                f"{len(prompts)} prompts exceed max_batch ({self.max_batch}); "
                "split them or build the decoder with a larger max_batch."
            )
        for prompt, p in zip(prompts, plist, strict=True):
            if not prompt:
                raise ValueError("A prompt is empty; give at least one token.")
            if len(prompt) + p.max_tokens > self.max_model_len:
                raise ValueError(
                    f"Prompt ({len(prompt)} tokens) + max_tokens ({p.max_tokens}) exceeds "
                    f"max_model_len ({self.max_model_len}); shorten it or lower max_tokens."
                )
        return [
            _Sequence(slot, list(prompt), len(prompt), p, make_generator(p, self.device))
            for slot, (prompt, p) in enumerate(zip(prompts, plist, strict=True))
        ]

    def _round(self, seqs: list[_Sequence], result: SpecResult) -> None:
        """Draft proposes, target verifies in one pass, each sequence takes what it earned."""
        ks = [s.num_to_propose(self.k) for s in seqs]
        drafts, draft_probs = self._propose(seqs, ks)
        emitted = self._verify(seqs, drafts, draft_probs)
        for seq, k, tokens in zip(seqs, ks, emitted, strict=True):
            result.emitted += self._advance(seq, k, tokens)
        result.rounds += 1
        result.seq_rounds += len(seqs)
        result.draft_passes += max(ks)
        result.proposed += sum(ks)
        result.accepted += sum(len(tokens) - 1 for tokens in emitted)

    def _propose(
        self, seqs: list[_Sequence], ks: list[int]
    ) -> tuple[list[list[int]], list[list[Tensor]]]:
        """k single-token draft passes for the whole batch (the first also catches up on the
        tokens the draft has not seen). Returns draft tokens and, for sampled sequences,
        the draft distribution q [vocab] each was drawn from."""
        drafts: list[list[int]] = [[] for _ in seqs]
        probs: list[list[Tensor]] = [[] for _ in seqs]
        for step in range(max(ks)):
            rows = [i for i, k in enumerate(ks) if k > step]
            if step == 0:
                cached = [seqs[i].draft_cached for i in rows]
                new = [seqs[i].token_ids[seqs[i].draft_cached :] for i in rows]
            else:
                cached = [len(seqs[i].token_ids) + step - 1 for i in rows]
                new = [drafts[i][-1:] for i in rows]
            slots = [seqs[i].slot for i in rows]
            ones = [1] * len(rows)
            logits = forward_rows(self.draft, self.draft_pool.kv, slots, cached, new, ones)
            tokens, qs = _draw(logits, [seqs[i] for i in rows])
            for i, token, q in zip(rows, tokens, qs, strict=True):
                drafts[i].append(token)
                if q is not None:
                    probs[i].append(q)
        return drafts, probs

    def _verify(
        self, seqs: list[_Sequence], drafts: list[list[int]], draft_probs: list[list[Tensor]]
    ) -> list[list[int]]:
        """One target pass over every sequence's unseen tokens + its drafts; the emitted
        tokens per sequence (accepted drafts + one from the target)."""
        new = [s.token_ids[s.target_cached :] + d for s, d in zip(seqs, drafts, strict=True)]
        num_rows = [len(d) + 1 for d in drafts]
        slots = [s.slot for s in seqs]
        cached = [s.target_cached for s in seqs]
        logits = forward_rows(self.target, self.target_pool.kv, slots, cached, new, num_rows)
        greedy = [s.params.greedy for s in seqs]
        argmax = logits.argmax(-1).tolist() if any(greedy) else []
        starts = [0, *itertools.accumulate(num_rows)]
        emitted = []
        for i, seq in enumerate(seqs):
            a, b = starts[i], starts[i + 1]
            if greedy[i]:
                emitted.append(accept_greedy(drafts[i], argmax[a:b]))
                continue
            vocab = logits.shape[-1]
            q = torch.stack(draft_probs[i]) if draft_probs[i] else logits.new_zeros(0, vocab)
            p = probabilities(logits[a:b], seq.params)
            tokens = torch.tensor(drafts[i], dtype=torch.long, device=logits.device)
            emitted.append(accept_sampled(tokens, q.float(), p, seq.generator))
        return emitted

    def _advance(self, seq: _Sequence, k: int, tokens: list[int]) -> int:
        """Append emitted tokens up to a stop; move both cache marks back over rejected
        drafts. Returns the number of tokens appended."""
        length, accepted = len(seq.token_ids), len(tokens) - 1
        seq.target_cached = length + accepted  # the original tokens + accepted drafts
        if k > 0:  # the draft saw the tokens and its first k - 1 drafts
            seq.draft_cached = min(length + k - 1, length + accepted)
        for count, token in enumerate(tokens, start=1):
            seq.token_ids.append(token)
            if self._is_finished(seq, token):
                seq.done = True
                return count
        return len(tokens)

    def _is_finished(self, seq: _Sequence, token: int) -> bool:
        params = seq.params
        if len(seq.generated) >= params.max_tokens or token in params.stop_token_ids:
            return True
        return not params.ignore_eos and token in self.eos_token_ids


def _draw(logits: Tensor, seqs: list[_Sequence]) -> tuple[list[int], list[Tensor | None]]:
    """The draft's token per row: argmax for greedy requests, else a draw from q (returned
    too, for the rejection test). logits [rows, vocab]."""
    tokens = logits.argmax(-1)
    qs: list[Tensor | None] = [None] * len(seqs)
    for row, seq in enumerate(seqs):
        if not seq.params.greedy:
            qs[row] = probabilities(logits[row], seq.params)
            tokens[row] = torch.multinomial(qs[row], 1, generator=seq.generator)[0]
    return tokens.tolist(), qs


def _same_device(a: torch.device, b: torch.device) -> bool:
    """ "cuda" and "cuda:0" name the same device (index None means the current one, 0 here)."""
    return a.type == b.type and (a.index or 0) == (b.index or 0)
