"""bench.speculative (section e of bench.engine): the report's arithmetic on made-up
measurements, best-of-N bookkeeping, and the losslessness assertion."""

from __future__ import annotations

import itertools

import pytest

from bench import speculative


def counts(k: int, rounds: int, accepted: int) -> dict:
    return {"accepted": accepted, "proposed": k * rounds, "emitted": rounds + accepted,
            "seq_rounds": rounds}  # fmt: skip


def test_report_prints_the_cost_model_and_the_difference():
    # plain: 1.0 s; k=1: 0.8 s, tau 1.5; k=2: 0.7 s, tau 2.0. c = 0.5 / 2 = 0.25;
    # v(2 tokens) = 2.2 / 2 = 1.1, v(3) = 2.4 / 2 = 1.2.
    best = {"engine": (1.2, []), "k=0": (1.0, counts(0, 100, 0), []),
            "k=1": (0.8, counts(1, 100, 50), []), "k=2": (0.7, counts(2, 100, 100), [])}  # fmt: skip
    text = speculative._report([(1, best)], (1, 2), 0.5, {1: 2.0, 2: 2.2, 3: 2.4}, 64, 3)
    # k=2: model 2.0 / (2 * 0.25 + 1.2) = 1.176; measured 1.0 / 0.7 = 1.4286: +21.4%
    row = next(line for line in text.splitlines() if line.startswith("| 1 | 2 |"))
    assert "| 1.18 | +21.4% |" in row
    # k=1: model 1.5 / (0.25 + 1.1) = 1.111; measured 1.25: +12.5%, inside 15%
    assert "+12.5%" in text
    assert "outside 15%: k=2 (+21%)" in text
    assert "c = 0.250" in text


def test_best_of_skips_the_warm_up_and_keeps_the_fastest():
    times = itertools.chain([0.1], [0.5, 0.3, 0.4])  # the 0.1 s warm-up does not count
    best = speculative.best_of({"a": lambda: (next(times), "tokens")}, repeats=3)
    assert best == {"a": (0.3, "tokens")}


def test_differing_tokens_fail_the_section():
    speculative._check_identical("k=1", [[1, 2]], [[1, 2]])
    with pytest.raises(AssertionError, match="lossless"):
        speculative._check_identical("k=1", [[1, 3]], [[1, 2]])
