"""Stage 5: the score formula, verified share and `rescore` of stored results."""

from __future__ import annotations

import pytest

from trainer.grading.rubric import rescore
from trainer.grading.rubric.score import score, verified_share


def row(verdict, weight=1.0, estimate=0.0, penalty=False, decided_by="verify"):
    return {
        "verdict": verdict,
        "weight": weight,
        "estimate": estimate,
        "penalty": penalty,
        "decided_by": decided_by,
    }


def test_hit_counts_fully_unclear_by_its_estimate_the_rest_nothing():
    points = [row("hit", 2), row("unclear", 1, 0.5), row("contradicted", 1, 0.9), row("missed")]
    assert score(points) == (2 + 0.5) / 5


def test_a_red_flag_hit_subtracts_its_weight_and_the_score_is_clamped():
    assert score([row("hit", 2), row("hit", 1, penalty=True)]) == 0.5
    assert score([row("unclear", 1, 0.2), row("hit", 1, penalty=True)]) == 0.0


def test_verified_share_is_the_verified_part_of_the_credit():
    points = [row("hit", 1), row("unclear", 2, 0.5), row("hit", 1, decided_by="check")]
    assert verified_share(points) == pytest.approx(2 / 3, abs=1e-4)


def test_rescore_after_a_check_turns_an_unclear_point_into_a_hit():
    stored = {
        "score": 0.25,
        "verified_share": 0.0,
        "flags": [],
        "points": [row("unclear", 1, 0.5), row("missed", 1)],
    }
    stored["points"][0] |= {"verdict": "hit", "decided_by": "check"}
    again = rescore(stored)
    assert again["score"] == 0.5 and again["verified_share"] == 1.0


def test_rescore_updates_the_red_flag():
    stored = {"flags": ["red flag"], "points": [row("hit"), row("missed", penalty=True)]}
    assert rescore(stored)["flags"] == []
    stored["points"][1]["verdict"] = "hit"
    assert rescore(stored)["flags"] == ["red flag"]


def test_old_results_without_verdicts_still_score():
    old = {
        "score": 0.5,
        "points": [
            {"hit": True, "weight": 1, "penalty": False},
            {"hit": False, "weight": 1, "penalty": False},
        ],
    }
    assert rescore(old)["score"] == 0.5
    assert rescore(old)["verified_share"] == 0.0  # read as decided by estimate
