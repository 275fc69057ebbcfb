"""lab.loadgen.retry: what is retried, full-jitter backoff, and the retry budget."""

from __future__ import annotations

import random

import pytest

from lab.loadgen.retry import POLICIES, Retrier, RetryBudget, RetryPolicy, is_retryable


def attempts_for(retrier, outcome):
    """Attempts one request makes when every attempt ends with `outcome`."""
    retrier.on_request()
    attempts = 1
    while retrier.decide(outcome, attempts - 1).delay is not None:
        attempts += 1
    return attempts


@pytest.mark.parametrize(
    ("outcome", "retryable"),
    [
        ("timeout", True),
        ("http 429: queue full", True),
        ("http 500", True),
        ("http 503: overloaded", True),
        ("error: ConnectError: connection refused", True),
        ("error: stream ended before [DONE]", True),
        ("http 400: max_tokens must be >= 1", False),
        ("http 401: bad key", False),
        ("http 404: no such model", False),
        ("ok", False),
    ],
)
def test_what_is_retried(outcome, retryable):
    assert is_retryable(outcome) is retryable


@pytest.mark.parametrize("kind", POLICIES)
def test_other_4xx_are_never_retried(kind):
    retrier = Retrier(RetryPolicy(kind, max_retries=5))
    for outcome in ["http 400: bad", "http 404", "http 422: invalid"]:
        assert attempts_for(retrier, outcome) == 1


def test_none_never_retries():
    retrier = Retrier(RetryPolicy("none", max_retries=5))
    decision = retrier.decide("http 503", 0)
    assert decision.delay is None and decision.reason == "retries off"
    assert attempts_for(retrier, "timeout") == 1


@pytest.mark.parametrize("max_retries", [0, 1, 3])
def test_immediate_retries_exactly_max_retries_at_once(max_retries):
    retrier = Retrier(RetryPolicy("immediate", max_retries=max_retries))
    assert attempts_for(retrier, "http 503") == max_retries + 1
    for n in range(max_retries):
        assert retrier.decide("timeout", n).delay == 0.0
    assert retrier.decide("timeout", max_retries).reason == "max retries"


def test_backoff_delays_are_full_jitter_within_the_cap():
    base, cap = 0.1, 1.0
    retrier = Retrier(
        RetryPolicy("backoff", max_retries=10, backoff_base=base, backoff_cap=cap), random.Random(5)
    )
    for n in range(10):
        ceiling = min(cap, base * 2**n)
        delays = [retrier.decide("http 503", n).delay for _ in range(2000)]
        assert all(0.0 <= d <= ceiling for d in delays)
        # full jitter: uniform over the whole interval, not clustered at its top
        assert min(delays) < 0.05 * ceiling and max(delays) > 0.95 * ceiling
    assert attempts_for(retrier, "timeout") == 11


def test_backoff_jitter_is_seeded():
    def delays(seed):
        r = Retrier(RetryPolicy("backoff"), random.Random(seed))
        return [r.decide("timeout", n).delay for n in range(3)]

    assert delays(1) == delays(1) != delays(2)


@pytest.mark.parametrize(("ratio", "cap"), [(0.1, 10.0), (0.1, 2.0), (0.5, 5.0)])
def test_budget_bounds_retries_when_everything_fails(ratio, cap):
    policy = RetryPolicy("budget", max_retries=3, budget_ratio=ratio, budget_cap=cap)
    retrier = Retrier(policy, random.Random(0))
    requests = 1000
    retries = sum(attempts_for(retrier, "http 503") - 1 for _ in range(requests))
    assert retries <= ratio * requests + cap
    assert retries >= ratio * requests - 1  # and it does spend what it earns
    assert retrier.decide("http 503", 0).reason == "retry budget exhausted"


def test_budget_is_backoff_while_tokens_last():
    policy = RetryPolicy("budget", max_retries=2, backoff_base=0.2, backoff_cap=0.3, budget_cap=10)
    retrier = Retrier(policy, random.Random(0))
    retrier.on_request()
    assert 0.0 <= retrier.decide("timeout", 0).delay <= 0.2
    assert 0.0 <= retrier.decide("timeout", 1).delay <= 0.3
    assert retrier.decide("timeout", 2).reason == "max retries"
    assert retrier.budget.tokens == pytest.approx(8.0)


def test_budget_bucket():
    budget = RetryBudget(ratio=0.5, cap=2.0)
    assert budget.tokens == 2.0  # starts full
    assert budget.withdraw() and budget.withdraw() and not budget.withdraw()
    budget.deposit()
    assert not budget.withdraw()  # half a token is not a retry
    budget.deposit()
    assert budget.withdraw()
    for _ in range(10):
        budget.deposit()
    assert budget.tokens == 2.0  # capped


@pytest.mark.parametrize(
    "kwargs",
    [{"kind": "exponential"}, {"max_retries": -1}, {"backoff_base": -0.1}, {"budget_ratio": -1}],
)
def test_bad_policies_are_rejected(kwargs):
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)
