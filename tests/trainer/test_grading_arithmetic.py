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
    assert "Correct given your answer to step 1:" in step2.feedback
    assert "kv_per_token" not in step2.feedback and "kv per token" not in step2.feedback
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
        (UREG.Quantity(320, "KB"), "between KiB and KB"),
        (UREG.Quantity(320 * 1.024**2, "KiB"), "between MiB and MB"),
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


# --- input the way people type it (issue 18) ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        # GPU counts
        ("52 GPUs", "", 52),
        ("52 GPU", "", 52),
        ("52 gpus", "", 52),
        # ratios
        ("3.5x", "", 3.5),
        ("3.5 X", "", 3.5),
        ("3.5×", "", 3.5),
        ("x3.5", "", 3.5),
        ("3.5 times", "", 3.5),
        ("2,048x", "", 2048),
        ("2^11 x", "", 2048),
        ("2 x 1024", "", 2048),
        ("2×10^9 B", "GB", 2),
        # token rates
        ("1200 tok/s", "token/s", 1200),
        ("1,200 tokens/s", "token/s", 1200),
        ("1.2k tok/s", "token/s", 1200),
        ("1200 Tok/sec", "token/s", 1200),
        ("1200 tokens per second", "token/s", 1200),
        ("30 tok/s per seq", "token/s", 30),
        ("1200 tok/s/GPU", "token/s", 1200),
        # sequences and requests
        ("40 seq", "", 40),
        ("40 seqs", "", 40),
        ("40 Sequences", "", 40),
        ("52 requests", "", 52),  # a count of requests answers a plain-number step
        ("52 req", "request", 52),
        ("52 sequences", "request", 52),
        ("150 req/s", "request/s", 150),
        ("150 requests per second", "request/s", 150),
        ("9000 req/min", "request/s", 150),
        # other counts
        ("12 replicas", "", 12),
        ("40 connections", "", 40),
        ("2 KV heads", "", 2),
        # percent and fraction steps: a bare number is in the step's unit
        ("52", "percent", 52),
        ("52.0", "percent", 52),
        ("0.52", "percent", 0.52),  # read in percent, graded as a fraction slip
        ("52%", "percent", 52),
        ("52 percent", "percent", 52),
        ("52%", "", 0.52),
        ("0.52", "", 0.52),
        # money per token
        ("1.2 $/1M tokens", "USD/token", 1.2e-6),
        ("$1.2 per million tokens", "USD/token", 1.2e-6),
        ("1.2 USD/Mtok", "USD/token", 1.2e-6),
        ("$1.2 / MTok", "USD/token", 1.2e-6),
        ("$1.20/M tokens", "USD/token", 1.2e-6),
        ("$1.2/1M tok", "USD/token", 1.2e-6),
        ("$0.0012 per 1K tokens", "USD/token", 1.2e-6),
        ("$0.0012/1k tokens", "USD/token", 1.2e-6),
        ("1.2 $/1M tokens", "USD/Mtok", 1.2),
        # GPU-hours, approximations, magnitudes
        ("12,000 GPU-hours", "hour", 12000),
        ("12k GPU-h", "hour", 12000),
        ("$2.5 per GPU-hour", "USD/hour", 2.5),
        ("~52 GPUs", "", 52),
        ("≈45 ms", "ms", 45),
        ("1.5M tokens", "token", 1.5e6),
        ("1.5 million tokens", "token", 1.5e6),
        ("1500k tokens", "token", 1.5e6),
    ],
)
def test_answers_parse_the_way_people_type_them(text, unit, expected):
    assert parse_answer(text, unit).magnitude == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "unit", "message"),
    [
        ("52 x H100", "", "“H100” is not a unit I know"),
        ("3.5 GB", "", "This step asks for a plain number"),
        ("1200 GB/s", "token/s", "This step asks for a token rate"),
        ("5 GB %", "GiB", "A percentage is a plain number"),
        ("3 tokens", "", "This step asks for a plain number"),
    ],
)
def test_typed_words_of_the_wrong_kind_are_still_explained(text, unit, message):
    with pytest.raises(AnswerError, match=message):
        parse_answer(text, unit)


def test_unknown_words_list_the_forms_that_work():
    with pytest.raises(AnswerError, match=r"tok/s, req/s, GPUs, USD/hour or \$/1M tokens"):
        parse_answer("52 widgets", "")


# --- feedback: one test per message (issue 18) -------------------------------------------


def one_step(unit: str, expected: str, **extra) -> Chain:
    step = {"name": "the_answer", "prompt": "p", "expression": expected, "unit": unit, **extra}
    problem = problems.from_dict({"parameters": {"one": {"value": 1}}, "steps": [step]})
    return Chain(problem, {"one": 1})


def graded(chain_: Chain, text: str):
    step = chain_.problem.steps[0]
    return grade_step(chain_, step.name, parse_answer(text, step.unit))


def test_a_fraction_on_a_percent_step_is_named():
    result = graded(one_step("percent", "52 percent"), "0.52")
    assert (result.verdict, result.credit) == ("slip", 0.0)
    assert result.feedback.startswith("You gave a fraction where this step asks for a percentage")
    assert "Type 52 or 52%" in result.feedback
    assert graded(one_step("percent", "52 percent"), "52").verdict == "correct"


def test_a_percentage_on_a_fraction_step_is_named():
    result = graded(one_step("", "0.3"), "30")
    assert result.verdict == "slip"
    assert result.feedback.startswith("This step asks for a fraction, not a percentage")
    assert "type 30% or 0.3" in result.feedback


def test_a_power_of_ten_on_a_ratio_step_is_not_called_a_percentage():
    result = graded(one_step("", "3.5"), "350x")
    assert result.feedback.startswith("Off by a factor of 10^2")


def test_half_the_answer_names_the_missing_factor_of_two():
    result = graded(one_step("KiB", "320 KiB"), "160 KiB")
    assert result.verdict == "slip"
    assert result.feedback.startswith("Exactly half the expected value")
    assert "K and V are both cached" in result.feedback


def test_twice_the_answer_names_the_extra_factor_of_two():
    result = graded(one_step("KiB", "320 KiB"), "640 KiB")
    assert result.verdict == "slip" and result.feedback.startswith("Exactly twice")


@pytest.mark.parametrize(
    ("text", "pair", "direction"),
    [
        ("327.68 KiB", "between KiB and KB", "high by 2.4%"),
        ("312.5 KiB", "between KiB and KB", "low by 2.4%"),
        (f"{320 * 1.024**2} KiB", "between MiB and MB", "high by 4.86%"),
        (f"{320 / 1.024**3} KiB", "between GiB and GB", "low by 7.37%"),
    ],
)
def test_x1000_for_x1024_has_its_own_message(text, pair, direction):
    result = graded(one_step("KiB", "320 KiB"), text)
    assert result.verdict == "slip"
    assert pair in result.feedback and direction in result.feedback
    assert "you mixed x1,000 and x1,024" in result.feedback


@pytest.mark.parametrize("off", [1.02, 1.04, 0.96, 1.07 * 0.99])
def test_a_plain_few_percent_off_is_not_called_a_unit_slip(off):
    result = graded(one_step("KiB", "320 KiB"), f"{320 * off} KiB")
    assert result.verdict == "incorrect"
    assert "KiB and" not in result.feedback and "x1,024" not in result.feedback
    assert result.feedback.startswith("Not within 1% of the expected value: yours is")
    assert f"{abs(off - 1) * 100:.2g}% {'high' if off > 1 else 'low'}" in result.feedback


def test_a_far_or_negative_answer_says_how_far():
    assert "yours is 37 times it" in graded(one_step("KiB", "320 KiB"), "11840 KiB").feedback
    assert "opposite sign" in graded(one_step("", "3.5"), "-3.5").feedback


def test_bits_for_bytes_keeps_its_message():
    result = graded(one_step("GB", "10 GB"), "80 GB")
    assert result.feedback == "Off by a factor of 8: you counted bits where bytes were needed."


def test_an_integer_step_does_not_accept_a_fraction_within_tolerance():
    sequences = one_step("", "52.7", integer="floor")
    assert graded(sequences, "52").verdict == "correct"
    assert graded(sequences, "52 sequences").verdict == "correct"
    result = graded(sequences, "52.1 sequences")  # within 1% of 52, but not whole
    assert (result.verdict, result.credit) == ("slip", 0.0)
    assert result.feedback == (
        "Not a whole number: this step asks for a whole number (round down), so 52.1 becomes 52."
    )


def test_an_integer_step_names_rounding_the_wrong_way():
    result = graded(one_step("", "51.3", integer="ceil"), "51 GPUs")
    assert result.verdict == "slip"
    assert result.feedback == "You rounded the wrong way: 51.3 must round up here, to 52, not 51."
    floor = graded(one_step("", "52.7", integer="floor"), "53")
    assert floor.feedback == "You rounded the wrong way: 52.7 must round down here, to 52, not 53."


def test_an_unrounded_wrong_answer_on_an_integer_step_is_told_to_round():
    result = graded(one_step("", "52.7", integer="floor"), "60.5")
    assert result.verdict == "incorrect"
    assert result.feedback.endswith("This step asks for a whole number (round down).")


KEYED = problems.from_dict(
    {
        "parameters": {
            "model": {"catalog": "models", "choices": ["llama-3-70b"]},
            "pool": {"value": 100, "unit": "GB"},
        },
        "steps": [
            {
                "name": "kv_bytes",
                "prompt": "p",
                "expression": "2 * model_layers * model_kv_heads * model_head_dim * 2 B",
                "unit": "KiB",
                "misconceptions": [
                    {
                        "expression": "2 * model_layers * model_heads * model_head_dim * 2 B",
                        "feedback": "{model_name} caches {model_kv_heads} KV heads, not "
                        "{model_heads}.",
                    }
                ],
            },
            {
                "name": "seqs_that_fit",
                "prompt": "p",
                "expression": "pool / (kv_bytes * 8192)",
                "unit": "",
                "integer": "floor",
                "misconceptions": [
                    {
                        "expression": "pool / (kv_bytes * 4096)",
                        "feedback": "Each of the {kv_bytes} per token is held for 8,192 tokens.",
                    }
                ],
            },
        ],
    }
)


def keyed_chain(**answers) -> Chain:
    variables = problems.variables_for(KEYED, {"model": "llama-3-70b", "pool": 100})
    return Chain(KEYED, variables, {k: UREG.Quantity(*v) for k, v in answers.items()})


def test_misconception_feedback_fills_its_placeholders():
    result = grade_step(keyed_chain(), "kv_bytes", UREG.Quantity(2560, "KiB"))
    assert result.verdict == "misconception"
    assert result.feedback == "Llama-3-70B caches 8 KV heads, not 64."
    later = grade_step(keyed_chain(), "seqs_that_fit", UREG.Quantity(74))  # floor(100 / 1.34)
    assert later.feedback == "Each of the 320 KiB per token is held for 8,192 tokens."


def test_feedback_names_steps_as_the_learner_sees_them():
    learner = keyed_chain(kv_bytes=(160, "KiB"))
    result = grade_step(learner, "seqs_that_fit", UREG.Quantity(74))  # floor(100 GB / 1.34 GB)
    assert grade_step(learner, "seqs_that_fit", UREG.Quantity(37)).verdict == "correct"
    assert result.verdict == "follow_through"
    assert result.feedback.startswith("Correct given your answer to step 1:")
    zero = grade_step(keyed_chain(kv_bytes=(0, "KiB")), "seqs_that_fit", UREG.Quantity(5))
    assert "Your answer to step 1 cannot be carried into this step" in zero.feedback
    for text in (result.feedback, zero.feedback):
        assert "kv_bytes" not in text and "kv bytes" not in text and "seqs" not in text
