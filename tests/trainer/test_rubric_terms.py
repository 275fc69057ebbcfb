"""Key terms and clause-scoped negation (verify stage helpers)."""

from __future__ import annotations

import pytest

from trainer.grading.rubric import terms
from trainer.grading.rubric.terms import Polarity


def pol(term: str, text: str) -> Polarity:
    return terms.polarity(terms.parse_term(term), terms.tagged_words(text))


def test_a_term_matches_its_alternatives_and_inflections():
    assert pol("compute-bound | FLOP", "it is compute bound") is Polarity.POSITIVE
    assert pol("compute-bound | FLOP", "thousands of FLOPs per byte") is Polarity.POSITIVE
    assert pol("chunk", "chunked prefill") is Polarity.POSITIVE
    assert pol("KV", "the KVs") is Polarity.POSITIVE
    assert pol("KV", "a kvetch") is Polarity.ABSENT
    assert pol("memory-bound", "decode is compute-bound") is Polarity.ABSENT


@pytest.mark.parametrize(
    "text",
    [
        "Prefill is not compute-bound",
        "prefill is never compute-bound",
        "prefill isn't compute-bound",
        "prefill is no longer compute-bound",
        "limited by bandwidth rather than being compute-bound",
        "instead of compute-bound it is limited by memory",
    ],
)
def test_negation_cues_negate_the_term(text):
    assert pol("compute-bound", text) is Polarity.NEGATED


def test_negation_covers_its_clause_and_stops_at_the_boundary():
    text = "Routing does not need to be cache-aware, but the cache key needs the precision"
    assert pol("routing", text) is Polarity.NEGATED  # the clause's subject too
    assert pol("cache key", text) is Polarity.POSITIVE
    assert pol("precision", text) is Polarity.POSITIVE


def test_rather_than_and_without_negate_only_what_follows():
    text = "use chunked prefill rather than disaggregation"
    assert pol("chunked prefill", text) is Polarity.POSITIVE
    assert pol("disaggregation", text) is Polarity.NEGATED
    assert pol("TTFT", "it bounds TPOT without hurting TTFT") is Polarity.NEGATED
    assert pol("TPOT", "it bounds TPOT without hurting TTFT") is Polarity.POSITIVE


def test_a_correction_after_not_negates_only_the_wrong_part():
    text = "Decode is memory-bound, not compute-bound"
    assert pol("memory-bound", text) is Polarity.POSITIVE
    assert pol("compute-bound", text) is Polarity.NEGATED


def test_not_only_is_not_a_negation():
    assert pol("bandwidth", "not only the bandwidth matters") is Polarity.POSITIVE


def test_a_term_mentioned_both_ways_counts_as_positive():
    assert pol("KV", "not the KV of the prompt, the KV of the output") is Polarity.POSITIVE


def test_content_terms_skip_stopwords_and_rubric_verbs():
    assert terms.content_terms("Explains that decode reads all the weights each step") == [
        [["decode"]],
        [["reads"]],
        [["weights"]],
        [["step"]],
    ]
