"""The rubric grader against the expert-labelled answers in tests/data/rubric_eval/, on the
HELD-OUT part (questions whose slug hashes into it; tuned.json never saw them).

The floors below are the levels measured when tuned.json was committed (docs/BENCHMARKS.md),
rounded down a little: a change that makes the grader worse on unseen questions fails here.
Where a floor is looser than the issue's target, the target is missed and the bench says so.
Speed is measured by the bench, never asserted here.
"""

from __future__ import annotations

import hashlib

import pytest

from bench.rubric_calibration import (
    analyse,
    bank_points,
    held_out,
    load_cases,
    metrics,
    results_of,
)
from trainer.grading.rubric import estimate, params

# The targets where the held-out part meets them (measured: agreement 85.8%,
# ordering 17/19, on-topic-wrong 0.05, off 0.01, Spearman 0.82, ECE 0.035); the caught
# contradictions miss their 80% target (measured 17/25 = 68%), so that floor guards the
# measured level instead.
# Grader 3.0 (issue 29) no longer calls a sentence wrong for reading close to an authored
# contradiction, so the old set's adversarial answers are mostly "not verified" (measured 5/25
# caught, 20%) and its on-topic-wrong mean rose to 0.21: the floors guard those measured levels.
# The headline is now the blind set (docs/BENCHMARKS.md).
# The estimate model refitted with the blind set's tuning part and two answer-level features
# (2026-12-07): on the blind held-out part agreement 68.0% -> 74.8%, ECE 0.259 -> 0.117, but
# unclear points in wrong answers earn more; this set's held-out on-topic-wrong mean went
# 0.21 -> 0.26 (measured), so its ceiling guards 0.30.
FLOORS = {
    "agreement": 0.83,
    "ordered_share": 0.75,
    "spearman": 0.80,
    "caught_share": 0.16,
}
CEILINGS = {"on-topic-wrong": 0.30, "off": 0.10, "ece": 0.10}


@pytest.fixture(scope="module")
def held():
    points, prompts = bank_points()
    cases = [c for c in load_cases() if c.slug in points and held_out(c.slug)]
    retrievals = analyse(cases, points, prompts)
    return metrics(cases, points, results_of(cases, points, retrievals, params.load()))


def test_the_split_is_by_question_and_holds_out_at_least_30_percent():
    slugs = sorted({c.slug for c in load_cases()})
    out = [s for s in slugs if held_out(s)]
    assert len(out) >= 0.3 * len(slugs)
    for slug in slugs:  # the contract's rule, fixed by the slug alone
        assert held_out(slug) == (int(hashlib.sha256(slug.encode()).hexdigest(), 16) % 10 < 4)


def test_every_held_out_question_has_the_four_levels():
    cases = [c for c in load_cases() if held_out(c.slug)]
    for slug in {c.slug for c in cases}:
        labels = {c.label for c in cases if c.slug == slug}
        assert {"strong", "partial", "on-topic-wrong", "off"} <= labels, slug


def test_the_estimate_model_is_committed_for_the_current_features():
    calibration = params.load().calibration
    assert calibration.features == estimate.FEATURES
    assert len(calibration.coefficients) == len(estimate.FEATURES)


def test_point_agreement_on_held_out_questions(held):
    assert held["agreement"] >= FLOORS["agreement"]


def test_strong_beats_partial_beats_wrong_and_off_on_held_out_questions(held):
    assert held["ordered"] / held["ordered_of"] >= FLOORS["ordered_share"]


def test_wrong_and_off_answers_score_low(held):
    assert held["mean"]["on-topic-wrong"] <= CEILINGS["on-topic-wrong"]
    assert held["mean"]["off"] <= CEILINGS["off"]


def test_scores_rank_answers_like_the_expert_and_estimates_are_calibrated(held):
    assert held["spearman"] >= FLOORS["spearman"]
    assert held["ece"] <= CEILINGS["ece"]


def test_adversarial_contradictions_are_caught(held):
    assert held["caught"] / held["contradictions"] >= FLOORS["caught_share"]
