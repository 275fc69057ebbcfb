"""Stage 1 of the rubric grader: sentences and clauses."""

from __future__ import annotations

from trainer.grading.rubric import split


def test_sentences_split_on_punctuation_paragraphs_and_bullets():
    text = (
        "First idea here today. Second idea\nwraps onto a new line!\n- a bulleted third idea\n"
        "* and a fourth one; fifth clause counts too\n\nA new paragraph starts here."
    )
    assert split.split_sentences(text) == [
        "First idea here today.",
        "Second idea wraps onto a new line!",
        "a bulleted third idea",
        "and a fourth one",
        "fifth clause counts too",
        "A new paragraph starts here.",
    ]


def test_fragments_under_four_words_are_not_sentences():
    assert split.split_sentences("ok. Yes sure. Decode is memory-bound.") == [
        "Decode is memory-bound."
    ]


def test_clauses_split_on_conjunctions_dashes_and_colons():
    assert split.split_clauses(
        "Decode is compute-bound and prefill is limited by memory bandwidth."
    ) == ["Decode is compute-bound", "and prefill is limited by memory bandwidth."]
    assert split.split_clauses(
        "Prefill is compute-bound for long prompts — decode is memory-bound at small batch"
    ) == ["Prefill is compute-bound for long prompts", "decode is memory-bound at small batch"]


def test_a_single_clause_sentence_has_no_clauses():
    assert split.split_clauses("We use tensor and pipeline parallelism on eight GPUs") == []


def test_restating_the_prompt_is_detected():
    prompt = "Explain why decode is memory-bound on an H100 at batch one."
    assert split.restates("Why is decode memory-bound on an H100 at batch one?", prompt)
    assert not split.restates("Each step reads all 141 GB of weights for one token.", prompt)
