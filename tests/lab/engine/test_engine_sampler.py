"""lab.engine.sampler: greedy, seeded reproducibility, top-k / top-p support, validation."""

from __future__ import annotations

import math

import pytest
import torch

from lab.engine.sampler import SamplingParams, make_generator, probabilities, sample

GREEDY = SamplingParams(temperature=0)


def random_logits(rows: int = 4, vocab: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3


def draw(logits: torch.Tensor, params: SamplingParams, times: int) -> list[int]:
    """`times` single-row draws for one request, with its own seeded generator."""
    generator = make_generator(params, logits.device)
    return [sample(logits[None], [params], [generator]).item() for _ in range(times)]


def test_greedy_is_argmax():
    logits = random_logits(rows=8)
    tokens = sample(logits, [GREEDY] * 8, [None] * 8)
    assert tokens.dtype == torch.long
    assert torch.equal(tokens, logits.argmax(-1))
    assert make_generator(GREEDY, "cpu") is None


def test_greedy_probabilities_are_one_hot():
    logits = random_logits(rows=3)
    probs = probabilities(logits, GREEDY)
    assert torch.equal(probs.argmax(-1), logits.argmax(-1))
    assert torch.equal(probs.sum(-1), torch.ones(3))
    assert int((probs > 0).sum()) == 3


def test_same_seed_same_samples_whatever_the_batch():
    logits = random_logits(rows=3, vocab=32)
    seeded = SamplingParams(temperature=1.5, seed=42)
    alone = draw(logits[1], seeded, times=20)
    assert draw(logits[1], seeded, times=20) == alone
    assert draw(logits[1], SamplingParams(temperature=1.5, seed=43), times=20) != alone
    # The same request in a batch with others (greedy and unseeded) draws the same tokens.
    params = [GREEDY, seeded, SamplingParams(temperature=1.0)]
    generators = [make_generator(p, "cpu") for p in params]
    batched = [sample(logits, params, generators)[1].item() for _ in range(20)]
    assert batched == alone


def test_top_k_restricts_support():
    logits = random_logits(rows=1, vocab=50)[0]
    params = SamplingParams(temperature=2.0, top_k=5, seed=0)
    allowed = set(logits.topk(5).indices.tolist())
    assert set(draw(logits, params, times=200)) <= allowed
    probs = probabilities(logits, params)
    assert set(probs.nonzero().flatten().tolist()) == allowed
    assert math.isclose(probs.sum().item(), 1.0, rel_tol=1e-6)


def test_top_p_keeps_smallest_set_reaching_p():
    probs_in = torch.tensor([0.5, 0.25, 0.15, 0.06, 0.04])
    logits = probs_in.log()
    kept = probabilities(logits, SamplingParams(top_p=0.8)).nonzero().flatten().tolist()
    assert kept == [0, 1, 2]  # 0.5 + 0.25 < 0.8 <= 0.5 + 0.25 + 0.15
    assert probabilities(logits, SamplingParams(top_p=0.01)).nonzero().flatten().tolist() == [0]
    shuffled = logits[torch.tensor([3, 0, 4, 2, 1])]  # order in the vocab must not matter
    kept = probabilities(shuffled, SamplingParams(top_p=0.8)).nonzero().flatten().tolist()
    assert kept == [1, 3, 4]
    params = SamplingParams(top_p=0.8, seed=1)
    assert set(draw(logits, params, times=200)) == {0, 1, 2}


def test_a_top_p_below_float32s_range_still_keeps_the_top_token():
    """p = 4.3e-238 (found by the API fuzz test) rounds to 0.0 against float32 sums: the top
    token must survive anyway, or every token is dropped and sampling meets NaN."""
    logits = random_logits(rows=1, vocab=50)[0]
    for p in (4.3e-238, 1e-46, 5e-324):
        probs = probabilities(logits, SamplingParams(top_p=p))
        assert probs.nonzero().flatten().tolist() == [int(logits.argmax())]
        assert draw(logits, SamplingParams(top_p=p, seed=0), times=3) == [int(logits.argmax())] * 3


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([2.0, 1.0, 0.0])
    cold = probabilities(logits, SamplingParams(temperature=0.5))
    hot = probabilities(logits, SamplingParams(temperature=2.0))
    assert cold[0] > probabilities(logits, SamplingParams())[0] > hot[0]
    assert torch.allclose(hot, torch.softmax(logits / 2, -1))


def test_sampling_follows_the_distribution():
    logits = torch.tensor([0.0, math.log(3.0)])  # p = [0.25, 0.75]
    tokens = draw(logits, SamplingParams(seed=7), times=2000)
    assert abs(sum(tokens) / len(tokens) - 0.75) < 0.04


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"temperature": -0.5},
            r"temperature must be a finite number >= 0 \(0 means greedy\); got -0.5.",
        ),
        ({"temperature": float("nan")}, "temperature must be a finite number"),
        ({"top_k": -1}, "top_k must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
    ],
)
def test_validation_errors_are_sentences(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        SamplingParams(**kwargs)
    assert str(err.value).endswith(".")


def test_params_defaults_and_stop_ids():
    params = SamplingParams(stop_token_ids=[3, 4])
    assert params.stop_token_ids == (3, 4) and hash(params)
    assert not params.greedy and GREEDY.greedy
    assert (params.temperature, params.top_k, params.top_p, params.max_tokens) == (1.0, 0, 1.0, 16)


def test_sample_checks_row_counts():
    with pytest.raises(ValueError, match="one of each per row"):
        sample(random_logits(rows=2), [GREEDY], [None])
