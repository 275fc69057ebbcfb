"""The rubric grader on real bank questions and the packaged MiniLM model."""

from __future__ import annotations

import pytest

from questions.bank import read_bank
from trainer.grading import rubric

BANK = {q.slug: q for q in read_bank().questions}


def points_of(slug: str) -> list[rubric.Point]:
    return [rubric.Point(p.text, p.weight, tuple(p.concepts), p.penalty) for p in BANK[slug].rubric]


SLUG = "kv-arith-llama3-70b-node"


def test_the_model_answer_scores_high_with_evidence_from_the_answer():
    question = BANK[SLUG]
    result = rubric.grade(question.model_answer, points_of(SLUG), prompt=question.prompt)
    assert result.score >= 0.6
    hits = [p for p in result.points if p.hit and not p.penalty]
    assert len(hits) >= 4
    flat = " ".join(question.model_answer.split())
    for point in hits:
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
    result = rubric.grade(answer, points_of(SLUG), prompt=BANK[SLUG].prompt)
    assert result.score == 0.0
    assert flag in result.flags


def test_restating_the_question_earns_nothing():
    question = BANK[SLUG]
    result = rubric.grade(question.prompt, points_of(SLUG), prompt=question.prompt)
    assert result.score == 0.0 and "restates the question" in result.flags


def test_a_list_of_concepts_is_not_an_answer():
    concepts = [c for p in BANK[SLUG].rubric for c in p.concepts]
    stuffed = ", ".join(concepts) + "."
    assert rubric.grade(stuffed, points_of(SLUG)).score <= 0.25


def test_a_red_flag_subtracts():
    points = [
        rubric.Point(
            "Streams tokens so the user sees the first words early",
            1.0,
            ("streaming", "first token"),
        ),
        rubric.Point(
            "Claims that streaming lowers the end-to-end latency of the request",
            1.0,
            ("lowers end-to-end latency",),
            penalty=True,
        ),
    ]
    good = rubric.grade("We stream tokens so the user sees the first words early.", points)
    bad = rubric.grade(
        "We stream tokens so the user sees the first words early. Streaming also lowers the "
        "end-to-end latency of the request.",
        points,
    )
    assert good.score == 1.0 and bad.score == 0.0 and "red flag" in bad.flags


def test_sentences_split_on_punctuation_paragraphs_and_bullets():
    text = (
        "First idea here today. Second idea\nwraps onto a new line!\n- a bulleted third idea\n"
        "* and a fourth one; fifth clause counts too\n\nA new paragraph starts here."
    )
    assert rubric.split_sentences(text) == [
        "First idea here today.",
        "Second idea wraps onto a new line!",
        "a bulleted third idea",
        "and a fourth one",
        "fifth clause counts too",
        "A new paragraph starts here.",
    ]


def test_concepts_match_whole_words_after_normalising():
    assert rubric.concepts_in("We use 8 KV heads (GQA).", ["8 KV heads", "gqa", "MHA"]) == (
        "8 KV heads",
        "gqa",
    )
    assert rubric.concepts_in("A GQAx model", ["GQA"]) == ()


def test_confidence_is_reported():
    result = rubric.grade(BANK[SLUG].model_answer, points_of(SLUG))
    assert 0.0 <= result.confidence <= 1.0
