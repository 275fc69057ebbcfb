"""lab.engine.speculative_cost: the two speedup formulas against values worked by hand."""

from __future__ import annotations

import pytest

from lab.engine.speculative_cost import (
    expected_tokens_per_step,
    percent_difference,
    speedup_from_tokens_per_step,
    speedup_iid,
)


def test_iid_speedup_by_hand():
    # alpha 0.5, k 3: tau = 1 + .5 + .25 + .125 = 1.875; cost 3 * 0.2 + 1 = 1.6.
    assert speedup_iid(0.5, 3, 0.2) == pytest.approx(1.875 / 1.6)  # 1.171875
    # alpha 0.8, k 2: tau = 1 + .8 + .64 = 2.44; cost 2 * 0.1 + 1 = 1.2.
    assert speedup_iid(0.8, 2, 0.1) == pytest.approx(2.44 / 1.2)
    assert speedup_iid(1.0, 4, 0.0) == 5.0  # a free, perfect draft: k + 1 tokens per pass
    assert speedup_iid(0.0, 4, 0.25) == pytest.approx(0.5)  # nothing accepted: 1 / (1 + 1)
    assert speedup_iid(0.3, 0, 0.5) == 1.0  # k = 0 is plain decoding


def test_cost_model_with_measured_tau_by_hand():
    # tau 2.0, k 2, c 0.3, v 1.1: 2 / (0.6 + 1.1) = 1.17647...
    assert speedup_from_tokens_per_step(2.0, 2, 0.3, 1.1) == pytest.approx(2 / 1.7)
    # the i.i.d. formula is this with tau = (1 - a^(k+1)) / (1 - a) and v = 1
    tau = expected_tokens_per_step(0.6, 3)
    assert tau == pytest.approx(1 + 0.6 + 0.36 + 0.216)
    assert speedup_from_tokens_per_step(tau, 3, 0.25, 1.0) == pytest.approx(
        speedup_iid(0.6, 3, 0.25)
    )
    assert speedup_from_tokens_per_step(1.0, 0, 0.3, 1.0) == 1.0


def test_a_costlier_verify_pass_lowers_the_speedup():
    assert speedup_from_tokens_per_step(2.5, 4, 0.2, 1.3) < speedup_from_tokens_per_step(
        2.5, 4, 0.2, 1.0
    )


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="v > 0"):
        speedup_from_tokens_per_step(2.0, 2, 0.3, 0.0)
    with pytest.raises(ValueError, match="k >= 0"):
        speedup_from_tokens_per_step(2.0, -1, 0.3, 1.0)
    with pytest.raises(ValueError, match="probability"):
        speedup_iid(1.2, 2, 0.3)


def test_percent_difference():
    assert percent_difference(1.15, 1.0) == pytest.approx(15.0)
    assert percent_difference(0.9, 1.2) == pytest.approx(-25.0)
