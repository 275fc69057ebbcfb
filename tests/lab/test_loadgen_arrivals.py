"""lab.loadgen.arrivals: Poisson, gamma (vLLM's burstiness) and constant arrival times."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from lab.loadgen.arrivals import arrival_times, check_rate, parse_rates

N = 20_000  # seeded draws: the same numbers every run, far inside the tolerances below


def gaps(rate, arrival="poisson", burstiness=1.0, seed=0, n=N):
    times = list(
        itertools.islice(arrival_times(rate, random.Random(seed), arrival, burstiness), n + 1)
    )
    return [b - a for a, b in itertools.pairwise(times)]


def cv(values):
    return statistics.pstdev(values) / statistics.fmean(values)


def test_first_arrival_is_at_zero_and_times_increase():
    times = list(itertools.islice(arrival_times(4.0, random.Random(1)), 50))
    assert times[0] == 0.0
    assert all(b >= a for a, b in itertools.pairwise(times))


@pytest.mark.parametrize("rate", [0.5, 5.0, 200.0])
def test_poisson_mean_gap_is_one_over_rate(rate):
    g = gaps(rate)
    # standard error of the mean is (1/rate)/sqrt(N) < 0.8 %; allow 5 %
    assert statistics.fmean(g) == pytest.approx(1 / rate, rel=0.05)
    assert cv(g) == pytest.approx(1.0, rel=0.05)  # exponential gaps


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 4.0])
def test_gamma_burstiness_sets_the_coefficient_of_variation(burstiness):
    g = gaps(10.0, "gamma", burstiness)
    assert statistics.fmean(g) == pytest.approx(0.1, rel=0.05)  # same mean rate
    # std error of the sample CV is < 2 % even for shape 0.25 (excess kurtosis 24); allow 10 %
    assert cv(g) == pytest.approx(1 / math.sqrt(burstiness), rel=0.10)


def test_gamma_with_burstiness_one_is_poisson():
    assert gaps(3.0, "gamma", 1.0, n=100) == pytest.approx(gaps(3.0, "poisson", n=100))


def test_constant_gaps_are_exact():
    assert gaps(4.0, "constant", n=10) == pytest.approx([0.25] * 10)


def test_infinite_rate_sends_everything_at_once():
    assert list(itertools.islice(arrival_times(math.inf, random.Random(0)), 5)) == [0.0] * 5


def test_seed_fixes_the_schedule():
    assert gaps(2.0, seed=7, n=20) == gaps(2.0, seed=7, n=20)
    assert gaps(2.0, seed=7, n=20) != gaps(2.0, seed=8, n=20)


@pytest.mark.parametrize(
    ("rate", "arrival", "burstiness", "match"),
    [
        (0.0, "poisson", 1.0, "rate must be > 0"),
        (-1.0, "poisson", 1.0, "rate must be > 0"),
        (math.nan, "poisson", 1.0, "rate must be > 0"),
        (1.0, "uniform", 1.0, "unknown arrival"),
        (1.0, "gamma", 0.0, "burstiness must be > 0"),
    ],
)
def test_bad_schedules_are_rejected(rate, arrival, burstiness, match):
    with pytest.raises(ValueError, match=match):
        check_rate(rate, arrival, burstiness)


def test_parse_rates():
    assert parse_rates("1, 2,4.5,inf") == [1.0, 2.0, 4.5, math.inf]
    for bad in ["", "1,x", "1,0", "-2"]:
        with pytest.raises(ValueError):
            parse_rates(bad)
