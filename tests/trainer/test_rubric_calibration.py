"""The rubric grader agrees with an expert on tests/data/rubric_calibration.yaml:
point-level agreement >= 80%, and strong > partial > buzzword/off-topic on every question."""

from __future__ import annotations

import statistics

import pytest

from bench.rubric_calibration import evaluate, load_cases
from trainer.grading import rubric


@pytest.fixture(scope="module")
def calibration():
    cases, points, prompts = load_cases()
    analyses = [rubric.analyse(c.text, points[c.slug], prompts[c.slug]) for c in cases]
    return cases, points, analyses


def test_the_calibration_set_is_big_enough(calibration):
    cases, _points, _ = calibration
    slugs = {c.slug for c in cases}
    assert len(slugs) >= 8
    for slug in slugs:
        labels = {c.label for c in cases if c.slug == slug}
        assert {"strong", "partial", "buzzword", "off-topic"} <= labels, slug


def test_point_level_agreement_is_at_least_80_percent(calibration):
    cases, points, analyses = calibration
    agreement, _ordered, _n, _scores = evaluate(cases, points, analyses, rubric.TUNED)
    assert agreement >= 0.80


def test_strong_beats_partial_beats_buzzword_and_off_topic_on_every_question(calibration):
    cases, points, analyses = calibration
    _agreement, _ordered, _n, scores = evaluate(cases, points, analyses, rubric.TUNED)
    for slug in sorted({c.slug for c in cases}):
        mean = {
            label: statistics.mean(scores[(slug, label)])
            for label in ("strong", "partial", "buzzword", "off-topic")
        }
        assert mean["strong"] > mean["partial"] > max(mean["buzzword"], mean["off-topic"]), (
            slug,
            mean,
        )
