"""The rubric grader on real bank questions (their authored claims, contradictions, key
terms and expects) with the packaged MiniLM model."""

from __future__ import annotations

import pytest

from bench.rubric_calibration import bank_points
from questions.bank import read_bank
from trainer.grading import rubric

BANK = {q.slug: q for q in read_bank().questions}
POINTS, PROMPTS = bank_points()
SLUG = "kv-arith-llama3-70b-node"


def test_the_model_answer_scores_high_with_evidence_from_the_answer():
    question = BANK[SLUG]
    result = rubric.grade(question.model_answer, POINTS[SLUG], prompt=question.prompt)
    assert result.score >= 0.6
    hits = [p for p in result.points if p.verdict == "hit" and not p.penalty]
    assert len(hits) >= 3
    flat = " ".join(question.model_answer.split())
    for point in hits:
        assert point.decided_by == "verify"
        assert point.evidence_parts and all(part in flat for part in point.evidence_parts)


@pytest.mark.parametrize(
    ("answer", "flag"),
    [
        ("", "empty"),
        ("ok", "empty"),
        (
            "Put a load balancer in front of the web tier, cache sessions in Redis and let the "
            "autoscaling group add instances when CPU goes above sixty percent.",
            "off-topic",
        ),
    ],
)
def test_empty_and_off_topic_answers_score_zero(answer, flag):
    result = rubric.grade(answer, POINTS[SLUG], prompt=BANK[SLUG].prompt)
    assert result.score <= 0.05
    assert flag in result.flags


def test_restating_the_question_earns_nothing():
    question = BANK[SLUG]
    result = rubric.grade(question.prompt, POINTS[SLUG], prompt=question.prompt)
    assert result.score == 0.0 and "restates the question" in result.flags
    assert {p.verdict for p in result.points} == {"missed"}


def test_a_list_of_key_terms_is_not_an_answer():
    terms = [t.split("|")[0].strip() for p in POINTS[SLUG] for t in p.key_terms + p.concepts]
    stuffed = ", ".join(terms) + "."
    result = rubric.grade(stuffed, POINTS[SLUG])
    assert result.score <= 0.25
    assert not any(p.verdict == "hit" for p in result.points if not p.penalty)


@pytest.mark.parametrize(
    "slug", sorted(s for s, q in BANK.items() if q.status == "published" and q.rubric)
)
def test_every_published_model_answer_earns_a_good_part_of_its_rubric(slug):
    result = rubric.grade(BANK[slug].model_answer, POINTS[slug], prompt=BANK[slug].prompt)
    # 0.3, not higher: false contradictions on model answers remain (docs/BENCHMARKS.md)
    assert result.score >= 0.3, [(p.verdict, p.reason) for p in result.points]


def test_the_stored_shape_has_verdicts_and_versions():
    stored = rubric.grade(BANK[SLUG].model_answer, POINTS[SLUG]).as_dict()
    assert stored["grader"] == "rubric" and stored["grader_version"] == "3.0"
    assert 0.0 <= stored["verified_share"] <= 1.0 and 0.0 <= stored["confidence"] <= 1.0
    for i, p in enumerate(stored["points"]):
        assert p["index"] == i and p["verdict"] in ("hit", "unclear", "contradicted", "missed")
        assert p["hit"] == (p["verdict"] == "hit")  # read by feedback written before verdicts
        assert len(p["rubric_version"]) == 12
    assert rubric.rescore(stored)["score"] == stored["score"]
