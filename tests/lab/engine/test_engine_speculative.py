"""Speculative decoding on small random models: greedy output equals the target's own greedy
output whatever the draft, and the rejection rule samples the target's distribution."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from engine_helpers import random_prompts, reference

from lab.engine.attention import DenseAttention
from lab.engine.config import ModelConfig
from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams, probabilities
from lab.engine.speculative import (
    SpeculativeDecoder,
    accept_greedy,
    accept_sampled,
)
from lab.engine.speculative_cost import expected_tokens_per_step

RAW = {
    "model_type": "llama",
    "vocab_size": 97,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "eos_token_id": 96,
    "bos_token_id": 0,
}
TARGET_CONFIG = ModelConfig.from_hf(RAW)
# An unrelated draft: other weights and another shape, same vocabulary.
DRAFT_CONFIG = ModelConfig.from_hf(
    {**RAW, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2}
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def random_model(config: ModelConfig, seed: int, std: float = 0.2) -> LlamaModel:
    torch.manual_seed(seed)
    model = LlamaModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, std)
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These models are tiny: a second intra-op thread only adds waiting on a busy CPU
    (11 s instead of 0.7 s for the end-to-end sampling test when the cores are shared)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def target() -> LlamaModel:
    return random_model(TARGET_CONFIG, seed=0)


@pytest.fixture(scope="module")
def perturbed(target) -> LlamaModel:
    """The target plus small noise: its argmax agrees most of the time, not always."""
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)
    return draft


@pytest.fixture(scope="module")
def unrelated() -> LlamaModel:
    return random_model(DRAFT_CONFIG, seed=2)


def prompts(n: int = 4, seed: int = 1) -> list[list[int]]:
    return random_prompts(n, seed)


@pytest.fixture(scope="module")
def expected(target) -> list[list[int]]:
    return [reference(target, p, GREEDY.max_tokens) for p in prompts()]


# --- the formula -------------------------------------------------------------------------
def test_expected_tokens_per_step():
    assert expected_tokens_per_step(0.0, 4) == 1.0
    assert expected_tokens_per_step(1.0, 4) == 5.0
    assert expected_tokens_per_step(0.5, 3) == pytest.approx(1.875)
    assert expected_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_tokens_per_step(0.999999, 2) == pytest.approx(3.0, abs=1e-4)
    with pytest.raises(ValueError, match="probability"):
        expected_tokens_per_step(1.5, 2)


# --- greedy: identical to the target ---------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_with_perturbed_draft_equals_target_greedy(target, perturbed, expected, k, batch):
    decoder = SpeculativeDecoder(target, perturbed, k=k, max_model_len=64, max_batch=4)
    result = decoder.generate(prompts()[:batch], GREEDY)
    assert result.tokens == expected[:batch]
    assert result.emitted == batch * GREEDY.max_tokens
    assert result.accepted <= result.proposed
    assert result.tokens_per_step == pytest.approx(result.emitted / result.seq_rounds)
    if batch == 4:  # enough tokens to see both acceptances and rejections
        assert 0.3 < result.acceptance_rate < 1
        assert result.rounds < GREEDY.max_tokens  # fewer target passes than tokens


def simulated_counts(draft, prompt, target_tokens, k) -> tuple[int, int]:
    """(proposed, accepted) of greedy speculation recomputed without any cache: each round
    the draft continues the true prefix k times and is checked against the target's tokens."""
    done = proposed = accepted = 0
    while done < len(target_tokens):
        k_round = min(k, len(target_tokens) - done - 1)
        proposal = reference(draft, prompt + target_tokens[:done], k_round)
        n = 0
        while n < k_round and proposal[n] == target_tokens[done + n]:
            n += 1
        proposed, accepted, done = proposed + k_round, accepted + n, done + n + 1
    return proposed, accepted


@pytest.mark.parametrize("k", [1, 3])
def test_acceptance_matches_a_no_cache_simulation(target, perturbed, expected, k):
    """Catches a draft cache that is not rolled back: stale K/V would change the drafts."""
    decoder = SpeculativeDecoder(target, perturbed, k=k, max_model_len=64, max_batch=4)
    result = decoder.generate(prompts(), GREEDY)
    counts = [
        simulated_counts(perturbed, p, e, k) for p, e in zip(prompts(), expected, strict=True)
    ]
    assert (result.proposed, result.accepted) == tuple(map(sum, zip(*counts, strict=True)))


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_identical_draft_accepts_everything(target, expected, k):
    decoder = SpeculativeDecoder(target, target, k=k, max_model_len=64, max_batch=4)
    result = decoder.generate(prompts(), GREEDY)  # 12 tokens: a multiple of k + 1
    assert result.tokens == expected
    assert result.acceptance_rate == 1.0
    assert result.tokens_per_step == k + 1
    assert result.rounds == GREEDY.max_tokens // (k + 1)


def test_unrelated_draft_still_gives_target_greedy(target, perturbed, unrelated, expected):
    decoder = SpeculativeDecoder(target, unrelated, k=3, max_model_len=64, max_batch=4)
    result = decoder.generate(prompts(), GREEDY)
    assert result.tokens == expected
    close = SpeculativeDecoder(target, perturbed, k=3, max_model_len=64, max_batch=4)
    assert result.acceptance_rate < close.generate(prompts(), GREEDY).acceptance_rate


def test_k0_is_plain_decoding(target, unrelated, expected):
    result = SpeculativeDecoder(target, unrelated, k=0, max_model_len=64).generate(
        prompts(), GREEDY
    )
    assert result.tokens == expected
    assert result.tokens_per_step == 1.0 and result.draft_passes == 0
    assert result.rounds == GREEDY.max_tokens


def test_sequences_finish_on_their_own_and_others_continue(target, perturbed, expected):
    budgets = [3, 12, 1, 7]
    params = [dataclasses.replace(GREEDY, max_tokens=n) for n in budgets]
    decoder = SpeculativeDecoder(target, perturbed, k=4, max_model_len=64, max_batch=4)
    result = decoder.generate(prompts(), params)
    assert result.tokens == [e[:n] for e, n in zip(expected, budgets, strict=True)]
    assert result.emitted == sum(budgets)


def test_stop_ids_and_eos_end_a_sequence(target, perturbed, expected):
    stop = expected[1][5]
    first = expected[1].index(stop)
    stopping = dataclasses.replace(GREEDY, stop_token_ids=(stop,))
    decoder = SpeculativeDecoder(target, perturbed, k=3, max_model_len=64, max_batch=4)
    assert decoder.generate([prompts()[1]], stopping).tokens == [expected[1][: first + 1]]

    eos_target = copy.deepcopy(target)
    eos_target.config = dataclasses.replace(TARGET_CONFIG, eos_token_ids=(stop,))
    decoder = SpeculativeDecoder(eos_target, perturbed, k=3, max_model_len=64, max_batch=4)
    honours = dataclasses.replace(GREEDY, ignore_eos=False)
    assert decoder.generate([prompts()[1]], honours).tokens == [expected[1][: first + 1]]
    assert decoder.generate([prompts()[1]], GREEDY).tokens == [expected[1]]  # ignore_eos


def test_bad_requests_are_refused_with_a_reason(target, unrelated):
    decoder = SpeculativeDecoder(target, unrelated, k=2, max_model_len=32, max_batch=2)
    with pytest.raises(ValueError, match="exceeds max_model_len"):
        decoder.generate([list(range(1, 30))], GREEDY)
    with pytest.raises(ValueError, match="max_batch"):
        decoder.generate(prompts(3), GREEDY)
    other_vocab = random_model(ModelConfig.from_hf({**RAW, "vocab_size": 50}), seed=3)
    with pytest.raises(ValueError, match="vocabulary"):
        SpeculativeDecoder(target, other_vocab)


# --- sampling: the target's distribution -------------------------------------------------
P = torch.tensor([0.30, 0.05, 0.20, 0.0, 0.15, 0.10, 0.15, 0.05])  # target
Q = torch.tensor([0.05, 0.30, 0.10, 0.25, 0.05, 0.15, 0.05, 0.05])  # draft


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    return 0.5 * float((a - b).abs().sum())


def empirical(first_tokens: list[int], vocab: int = 8) -> torch.Tensor:
    counts = torch.bincount(torch.tensor(first_tokens), minlength=vocab).float()
    return counts / counts.sum()


def chi_square(first_tokens: list[int], p: torch.Tensor) -> float:
    """Pearson's statistic over the tokens p gives mass (7 dof here: 99.9% quantile 24.3)."""
    n = len(first_tokens)
    observed = empirical(first_tokens, p.numel()) * n
    seen = p > 0
    return float(((observed[seen] - n * p[seen]) ** 2 / (n * p[seen])).sum())


def well_mixed_seeds(n: int) -> list[int]:
    """Consecutive small seeds give torch's CPU Mersenne Twister visibly correlated first
    draws (chi-square ~17 on 20k samples of one distribution); draw the seeds instead."""
    return torch.randint(0, 2**62, (n,), generator=torch.Generator().manual_seed(0)).tolist()


@pytest.mark.parametrize("k", [1, 3])
def test_rejection_sampling_reproduces_the_target_distribution(k):
    assert total_variation(P, Q) > 0.4  # the draft alone would fail the test
    target_rows = torch.stack([P, *[torch.roll(P, i) for i in range(1, k + 1)]])  # [k+1, 8]
    firsts, lengths = [], []
    for seed in well_mixed_seeds(6000):
        g = torch.Generator().manual_seed(seed)
        drafts = torch.multinomial(Q, k, replacement=True, generator=g)
        out = accept_sampled(drafts, Q.expand(k, 8), target_rows, g)
        assert out[:-1] == drafts[: len(out) - 1].tolist()
        firsts.append(out[0])
        lengths.append(len(out))
    assert total_variation(empirical(firsts), P) < 0.05
    assert chi_square(firsts, P) < 24.3
    assert 3 not in firsts  # the target gives token 3 no mass; the draft gives it 25%
    # The first draft token is accepted with probability sum(min(p, q)) = 1 - TV.
    accepted_first = sum(n > 1 for n in lengths) / len(lengths)
    assert accepted_first == pytest.approx(1 - total_variation(P, Q), abs=0.03)


def test_rejection_with_the_target_as_draft_accepts_all_and_adds_a_bonus():
    g = torch.Generator().manual_seed(0)
    drafts = torch.multinomial(P, 4, replacement=True, generator=g)
    out = accept_sampled(drafts, P.expand(4, 8), P.expand(5, 8), g)
    assert len(out) == 5 and out[:4] == drafts.tolist()


def test_accept_greedy_takes_the_prefix_and_the_target_token():
    assert accept_greedy([5, 6, 7], [5, 6, 9, 1]) == [5, 6, 9]
    assert accept_greedy([5, 6, 7], [5, 6, 7, 1]) == [5, 6, 7, 1]  # bonus token
    assert accept_greedy([4], [5, 6]) == [5]
    assert accept_greedy([], [8]) == [8]


def test_first_sampled_token_follows_the_target_end_to_end():
    """The whole pipeline (draft draws, target pass, row alignment), 64 seeds per batch."""
    vocab8 = {**RAW, "vocab_size": 8, "eos_token_id": 7, "num_hidden_layers": 1}
    target8 = random_model(ModelConfig.from_hf(vocab8), seed=4, std=0.3)
    draft8 = random_model(ModelConfig.from_hf({**vocab8, "hidden_size": 32}), seed=5)
    prompt = [1, 2, 3, 4, 5]
    base = SamplingParams(temperature=1.0, max_tokens=2, ignore_eos=True)  # one round
    with torch.inference_mode():
        hidden = target8(torch.tensor(prompt), torch.arange(5), DenseAttention([5]))
        p = probabilities(target8.logits(hidden[-1:])[0], base)
        hidden = draft8(torch.tensor(prompt), torch.arange(5), DenseAttention([5]))
        q = probabilities(draft8.logits(hidden[-1:])[0], base)
    assert total_variation(p, q) > 0.15
    decoder = SpeculativeDecoder(target8, draft8, k=1, max_model_len=16, max_batch=64)
    seeds, firsts = well_mixed_seeds(1024), []
    for batch in range(0, len(seeds), 64):
        params = [dataclasses.replace(base, seed=s) for s in seeds[batch : batch + 64]]
        firsts += [t[0] for t in decoder.generate([prompt] * 64, params).tokens]
    assert total_variation(empirical(firsts), p) < 0.05
    assert chi_square(firsts, p) < 24.3


def test_seeded_sampling_is_reproducible_across_batching(target, perturbed, expected):
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=10, ignore_eos=True)
    decoder = SpeculativeDecoder(target, perturbed, k=3, max_model_len=64, max_batch=4)
    alone = decoder.generate([prompts()[0]], params).tokens[0]
    batched = decoder.generate(prompts(), [params, GREEDY, GREEDY, GREEDY]).tokens
    assert alone == batched[0] and len(alone) == 10
    assert batched[1:] == expected[1:]  # greedy neighbours are unaffected


def test_identical_draft_accepts_nearly_all_sampled_tokens(target):
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=12, ignore_eos=True)
    decoder = SpeculativeDecoder(target, target, k=3, max_model_len=64, max_batch=4)
    result = decoder.generate(prompts(), params)
    assert result.acceptance_rate > 0.95
