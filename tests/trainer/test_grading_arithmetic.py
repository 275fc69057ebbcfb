"""Answer parsing and step grading: units, tolerance, follow-through, misconceptions, slips."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from questions import catalog, problems
from questions.expressions import UREG
from trainer.grading.arithmetic import AnswerError, Chain, grade_step, parse_answer

KV = "2 * model_layers * model_kv_heads * model_head_dim * dtype_bytes"
PROBLEM = problems.from_dict(
    {
        "parameters": {
            "model": {"catalog": "models", "choices": ["llama-3-70b"]},
            "dtype": {"catalog": "dtypes", "choices": ["bf16"]},
            "context": {"choices": [8192], "unit": "token"},
        },
        "steps": [
            {
                "name": "kv_per_token",
                "prompt": "p",
                "expression": KV,
                "unit": "KiB",
                "hints": ["K and V", "KV heads"],
                "misconceptions": [
                    {
                        "expression": KV.removeprefix("2 * "),
                        "feedback": "Forgot the x2 for K and V.",
                    },
                    {
                        "expression": KV.replace("kv_heads", "heads"),
                        "feedback": "Used attention heads.",
                    },
                ],
            },
            {
                "name": "kv_per_seq",
                "prompt": "p",
                "expression": "kv_per_token * context / token",
                "unit": "GiB",
            },
            {"name": "seqs", "prompt": "p", "expression": "floor(40 GiB / kv_per_seq)", "unit": ""},
        ],
    }
)


def chain(**answers) -> Chain:
    variables = problems.variables_for(
        PROBLEM, {"model": "llama-3-70b", "dtype": "bf16", "context": 8192}
    )
    return Chain(PROBLEM, variables, {k: UREG.Quantity(v) for k, v in answers.items()})


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("327680", "B", 327680),
        ("320 KiB", "B", 327680),
        ("0.3125 MiB", "B", 327680),
        ("3.2768e5 B", "B", 327680),
        ("1.2 TB/s", "GB/s", 1200),
        ("45 ms", "s", 0.045),
        ("1,024", "B", 1024),
        ("2^20 B", "MiB", 1),
        ("1 048 576 B", "MiB", 1),
        ("320", "KiB", 320),
        ("45 %", "", 0.45),
        ("3 USD/hour", "USD/hour", 3),
        ("1,200 token/s", "token/s", 1200),
    ],
)
def test_answers_parse_in_many_spellings(text, unit, expected):
    assert parse_answer(text, unit).magnitude == pytest.approx(expected)


def test_a_unit_of_the_wrong_dimension_is_explained():
    with pytest.raises(AnswerError) as error:
        parse_answer("5 GB/s", "GiB")
    assert str(error.value) == (
        "This step asks for a memory size (GiB); 5 GB/s is a rate of data (bandwidth)."
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Enter a number"),
        ("lots", "is not a unit I know"),
        ("12 GBs", "“GBs” is not a unit I know"),
        ("1,5", "Use a dot for decimals"),
        ("3 +", "could not read"),
        ("__import__('os')", "could not read"),
    ],
)
def test_unreadable_input_gets_a_message(text, message):
    with pytest.raises(AnswerError, match=message):
        parse_answer(text, "GiB")


def test_the_reference_answer_is_correct_in_any_unit():
    result = grade_step(chain(), "kv_per_token", UREG.Quantity(327680, "B"))
    assert (result.verdict, result.credit, result.expected) == ("correct", 1.0, 320)


def test_tolerance_is_relative():
    assert grade_step(chain(), "kv_per_token", UREG.Quantity(322, "KiB")).verdict == "correct"
    assert grade_step(chain(), "kv_per_token", UREG.Quantity(325, "KiB")).verdict != "correct"


def test_authored_misconceptions_are_named():
    forgot = grade_step(chain(), "kv_per_token", UREG.Quantity(160, "KiB"))
    assert (forgot.verdict, forgot.credit) == ("misconception", 0.0)
    assert forgot.feedback == "Forgot the x2 for K and V."
    heads = grade_step(chain(), "kv_per_token", UREG.Quantity(2560, "KiB"))
    assert heads.feedback == "Used attention heads."


def test_follow_through_credit_when_only_the_earlier_step_is_wrong():
    learner = chain(kv_per_token=UREG.Quantity(160, "KiB"))  # forgot the x2 in step 1
    step2 = grade_step(learner, "kv_per_seq", UREG.Quantity(1.25, "GiB"))
    assert step2.verdict == "follow_through"
    assert step2.credit == 1.0
    assert step2.broke_at == "kv_per_token"
    assert "Correct given your step 1 (kv per token)" in step2.feedback
    assert step2.expected == 2.5 and step2.expected_given_yours == 1.25


def test_follow_through_recomputes_every_dependent_step():
    learner = chain(kv_per_token=UREG.Quantity(160, "KiB"), kv_per_seq=UREG.Quantity(1.25, "GiB"))
    step3 = grade_step(learner, "seqs", UREG.Quantity(32))  # floor(40 / 1.25)
    assert (step3.verdict, step3.broke_at) == ("follow_through", "kv_per_token")
    assert grade_step(learner, "seqs", UREG.Quantity(16)).verdict == "correct"


def test_a_wrong_answer_after_a_broken_chain_is_still_wrong():
    learner = chain(kv_per_token=UREG.Quantity(160, "KiB"))
    result = grade_step(learner, "kv_per_seq", UREG.Quantity(7, "GiB"))
    assert result.verdict == "incorrect" and result.broke_at == "kv_per_token"


@pytest.mark.parametrize(
    ("answer", "phrase"),
    [
        (UREG.Quantity(3200, "KiB"), "10^1"),
        (UREG.Quantity(0.32, "KiB"), "10^-3"),
        (UREG.Quantity(320, "KB"), "KiB vs KB"),
        (UREG.Quantity(320 * 1.024**2, "KiB"), "MiB vs MB"),
        (UREG.Quantity(2560, "KiB") * 1.0001, "Used attention heads"),  # authored wins
        (UREG.Quantity(320 * 8, "KiB") / 1.0001, "Used attention heads"),
    ],
)
def test_generic_slips_are_detected_without_authoring(answer, phrase):
    assert phrase in grade_step(chain(), "kv_per_token", answer).feedback


def test_bits_for_bytes_is_a_slip_on_memory_steps():
    result = grade_step(chain(), "kv_per_seq", UREG.Quantity(2.5 * 8, "GiB"))
    assert result.verdict == "slip" and "factor of 8" in result.feedback


def test_each_hint_costs_ten_percent_of_the_step():
    assert grade_step(
        chain(), "kv_per_token", UREG.Quantity(320, "KiB"), hints_used=2
    ).credit == pytest.approx(0.8)


UNITS_BY_DIMENSION = {
    "B": ["B", "KB", "KiB", "MB", "MiB", "GB", "GiB", "TB", "bit", "Gb"],
    "GB/s": ["B/s", "MB/s", "GB/s", "TB/s", "GiB/s", "Gb/s"],
    "ms": ["s", "ms", "us", "ns", "minute", "hour"],
    "token/s": ["token/s", "token/ms", "token/minute"],
}


@settings(max_examples=300, deadline=None)
@given(
    dimension=st.sampled_from(sorted(UNITS_BY_DIMENSION)),
    data=st.data(),
    magnitude=st.floats(min_value=1e-3, max_value=1e12, allow_nan=False),
)
def test_any_value_printed_in_any_unit_parses_back(dimension, data, magnitude):
    unit = data.draw(st.sampled_from(UNITS_BY_DIMENSION[dimension]))
    value = UREG.Quantity(magnitude, unit)
    text = f"{value.magnitude:.6g} {unit}"
    parsed = parse_answer(text, dimension)
    assert parsed.magnitude == pytest.approx(value.to(dimension).magnitude, rel=1e-5)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=60))
def test_random_junk_never_raises_anything_but_an_answer_error(text):
    with contextlib.suppress(AnswerError):
        parse_answer(text, "GiB")


def test_catalog_is_loaded_once():
    assert catalog.load_catalog() is catalog.load_catalog()
