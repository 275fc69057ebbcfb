"""Numbers with units in answers, checked against a point's `expects` (pint)."""

from __future__ import annotations

import pytest

from trainer.grading.rubric import numbers
from trainer.grading.rubric.numbers import Expect, Status

KV_PER_TOKEN = Expect(320, "KiB", 0.10, "KV bytes per token")


def check(text: str, *expects: Expect) -> tuple[Status, str]:
    return numbers.check(numbers.stated_numbers(text), expects)


def test_the_right_value_matches():
    assert check("KV is 320 KiB per token", KV_PER_TOKEN)[0] is Status.OK
    assert check("2 x 80 x 8 x 128 x 2 = 327,680 bytes", KV_PER_TOKEN)[0] is Status.OK


def test_a_wrong_value_with_the_right_unit_is_wrong_with_a_reason():
    status, reason = check("KV is 512 KiB per token", KV_PER_TOKEN)
    assert status is Status.WRONG
    assert (
        reason == "You said 512 KiB per token; this point expects ≈320 KiB for KV bytes per token."
    )


def test_gb_is_not_gib():
    ten_gib = Expect(10, "GiB", 0.05)
    assert check("each sequence takes 10 GiB", ten_gib)[0] is Status.OK
    assert check("each sequence takes 10.7 GB", ten_gib)[0] is Status.OK  # the same amount
    assert check("each sequence takes 10 GB", ten_gib)[0] is Status.WRONG  # 7% less


def test_several_numbers_in_one_sentence_each_find_their_expectation():
    per_sequence = Expect(10, "GiB", 0.05, "KV per sequence")
    text = "Weights are 141 GB, KV is 320 KiB per token, so 10 GiB per 32K-token sequence"
    assert check(text, KV_PER_TOKEN, per_sequence)[0] is Status.OK
    wrong = "Weights are 141 GB, KV is 320 KiB per token, so 30 GiB per 32K-token sequence"
    status, reason = check(wrong, KV_PER_TOKEN, per_sequence)
    assert status is Status.WRONG and "30 GiB" in reason and "≈10 GiB" in reason


def test_only_a_single_figure_of_its_kind_can_be_wrong_and_a_dtype_multiple_is_not_proof():
    budget = Expect(435, "GB", 0.05, "KV budget")
    assert check("576 GB - 141 GB = 435 GB for KV", budget)[0] is Status.OK
    # three figures of the kind: which one is meant for the budget is not known, no proof
    assert check("576 GB - 141 GB leaves 250 GB for KV", budget)[0] is Status.NONE
    assert check("that leaves 250 GB for KV", budget)[0] is Status.WRONG
    # 870 GB is twice the budget: the same figure in another dtype, or another quantity
    assert check("FP32 weights would leave 870 GB", budget)[0] is Status.NONE
    # just outside the tolerance: a rounder or another honest assumption, not proof
    assert check("about 490 GB for KV", budget)[0] is Status.NONE
    assert check("about 600 GB for KV", budget)[0] is Status.WRONG


def test_numbers_of_another_dimension_or_far_off_are_other_quantities():
    assert check("at 3.35 TB/s and 25 ms per token", KV_PER_TOKEN)[0] is Status.NONE
    assert check("the weights take 141 GB", KV_PER_TOKEN)[0] is Status.NONE


def test_multipliers_ranges_and_number_words():
    stated = numbers.stated_numbers("an 8k prompt on a 70B model, 150–300 ms, 1.2 million tokens")
    values = {s.text: s.quantity for s in stated}
    assert values["8k"].magnitude == 8000
    assert values["70B"].magnitude == 70e9  # attached B: billions, not bytes
    assert values["150"].to("s").magnitude == pytest.approx(
        0.15
    )  # a range's first number takes the unit
    assert values["1.2 million tokens"].to("token").magnitude == pytest.approx(1.2e6)


def test_model_names_are_not_numbers():
    assert numbers.stated_numbers("H100 with FP8 runs Llama-3.1") == []


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("320 KiB ±10%", Expect(320, "KiB", 0.10)),
        ("128 KiB", Expect(128, "KiB", 0.10)),
        ("2.5 GiB ±5%", Expect(2.5, "GiB", 0.05)),
        ({"value": 10, "unit": "GiB", "tol": 0.05, "label": "x"}, Expect(10, "GiB", 0.05, "x")),
    ],
)
def test_expectations_parse_from_literals_and_resolved_dicts(item, expected):
    assert numbers.parse_expect(item) == expected


def test_a_count_compound_unit_also_states_the_amount_per_one():
    stated = {s.text: s for s in numbers.stated_numbers("~17 GB/req, 3.35 TB/s")}
    assert stated["17 GB/req"].base.to("GB").magnitude == pytest.approx(17)
    assert stated["3.35 TB/s"].base is None  # a rate, not an amount


def test_a_wrong_figure_in_a_text_not_naming_the_quantity_is_no_proof():
    floor = numbers.Expect(4.79, "ms", 0.1, "weight-read floor")
    stated = numbers.stated_numbers("the launch overhead is 17 ms of CPU time")
    assert (
        numbers.check_each(stated, [floor], (), "the launch overhead is 17 ms of CPU time")[0][0]
        is numbers.Status.NONE
    )
    said = "the weight-read floor is 17 ms"
    assert numbers.check_each(numbers.stated_numbers(said), [floor], (), said)[0][0] is (
        numbers.Status.WRONG
    )
