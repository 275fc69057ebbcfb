"""Rubric point metadata in bank files (issue 19): claims, contradictions, key_terms, expects,
check, question variables and follow-up objects; each error names file, question and point;
a published scenario/design question must give every earning point claims and a check."""

from __future__ import annotations

import pytest
from bankfiles import topic_data, write_topic

from questions.bank import read_bank

FILE = "kv-cache-arithmetic.yaml"


def errors_for(tmp_path, data) -> list[str]:
    return [str(e) for e in read_bank([write_topic(tmp_path, data)]).errors]


def only_error(tmp_path, data) -> str:
    errors = errors_for(tmp_path, data)
    assert len(errors) == 1, errors
    return errors[0]


def scenario(data):
    return data["questions"][0]


def point(data, index):
    return scenario(data)["rubric"][index]


def test_every_new_field_parses(tmp_path):
    bank = read_bank([write_topic(tmp_path, topic_data())])
    assert bank.errors == []
    question = bank.questions[0]
    assert question.variables["model"].choices == ["llama-3-70b"]
    first, second = question.rubric[0], question.rubric[1]
    assert first.claims == ["Only the KV heads are cached; query heads share them."]
    assert first.key_terms == ["KV heads | key-value heads"]
    assert first.check.answer == "The KV heads" and first.check.options is None
    assert second.expects[1].unit == "KiB" and second.check.number.tol == "5%"
    assert question.rubric[3].check.number == "160 KiB ±10%"
    plain, probed = question.follow_ups
    assert (plain.prompt, plain.rubric) == ("And MLA?", [])
    assert probed.rubric[0].expects == ["40 GiB ±5%"] and probed.rubric[0].check is None


def test_plain_follow_ups_are_written_back_as_strings():
    from questions.bank import QuestionIn

    question = QuestionIn.model_validate(scenario(topic_data()))
    dumped = question.model_dump(mode="json", exclude_defaults=True)["follow_ups"]
    assert dumped[0] == "And MLA?"
    assert dumped[1]["prompt"] == "And at 128K?" and dumped[1]["rubric"][0]["key_terms"]


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            lambda d: point(d, 0).update(claims=["a", "b", "c", "d"]),
            "rubric[0] > claims",
            "List should have at most 3 items",
        ),
        (
            lambda d: point(d, 0).update(key_terms=["prefill", "  "]),
            "rubric[0] > key_terms",
            "has an empty entry",
        ),
        (
            lambda d: point(d, 0)["check"].pop("answer"),
            "rubric[0] > check",
            "give exactly one of `answer` (a multiple choice) or `number` (a number check)",
        ),
        (
            lambda d: point(d, 0)["check"].update(number="8"),
            "rubric[0] > check",
            "give exactly one of `answer`",
        ),
        (
            lambda d: point(d, 0).update(contradictions=[]),
            "rubric[0]",
            "check: a multiple-choice check needs at least 2 options in all",
        ),
        (
            lambda d: point(d, 2)["check"].update(options=[]),
            "rubric[2]",
            "needs at least 2 options in all",
        ),
        (
            lambda d: point(d, 2)["check"].update(options=["Paging", "GQA"]),
            "rubric[2] > check",
            "the answer 'Paging' is also listed as a wrong option",
        ),
        (
            lambda d: point(d, 3)["check"].update(options=["x"]),
            "rubric[3] > check",
            "`options` belong to a multiple choice",
        ),
        (
            lambda d: point(d, 1)["check"].update(colour="red"),
            "rubric[1] > check > colour",
            "is not a known field",
        ),
    ],
)
def test_a_malformed_point_is_named_by_file_question_and_index(tmp_path, change, path, message):
    data = topic_data()
    change(data)
    error = only_error(tmp_path, data)
    assert error.startswith(f"{FILE}: questions[0] (kv-why) > {path}"), error
    assert message in error


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        (
            lambda d: point(d, 1)["expects"][0].update(expr="model_heds / model_kv_heads"),
            "rubric[1] > expects[0]",
            "unknown variable 'model_heds' — did you mean 'model_heads'?",
        ),
        (
            lambda d: point(d, 1)["expects"][1].update(unit="GB/s"),
            "rubric[1] > expects[1]",
            "the unit is 'GB/s' (a rate of data (bandwidth)) but the expression yields B",
        ),
        (
            lambda d: point(d, 1)["expects"][1].update(unit="KiX"),
            "rubric[1] > expects[1]",
            "unknown unit 'KiX'",
        ),
        (
            lambda d: point(d, 1)["expects"].append("320 KiB ±10"),
            "rubric[1] > expects[2]",
            "tolerance '10' needs a % sign",
        ),
        (
            lambda d: point(d, 1)["expects"].append({"expr": "1", "tol": 5}),
            "rubric[1] > expects[2]",
            "tolerance 5 reads as 500%",
        ),
        (
            lambda d: point(d, 1)["check"]["number"].update(expr="gpu_memory"),
            "rubric[1] > check > number",
            "unknown name 'gpu_memory'",
        ),
        (
            lambda d: point(d, 3)["check"].update(number="160 KiX"),
            "rubric[3] > check > number",
            "unknown unit 'KiX'",
        ),
        (
            lambda d: scenario(d)["follow_ups"][1]["rubric"][0].update(expects=["40 GiBs"]),
            "follow_ups[1] > rubric[0] > expects[0]",
            "unknown unit 'GiBs'",
        ),
        (
            lambda d: scenario(d)["variables"]["model"]["choices"].append("llama-3-8b"),
            "variables",
            "variable 'model' takes 2 values; a question's variables are fixed",
        ),
        (
            lambda d: scenario(d)["variables"].update(gpu={"catalog": "gpus", "choices": ["h999"]}),
            "variables",
            "no entry 'h999'",
        ),
        (
            lambda d: scenario(d)["variables"].update(GB={"value": 4}),
            "variables",
            "the name 'GB' is already a unit",
        ),
    ],
)
def test_numbers_must_evaluate_against_the_question_variables(tmp_path, change, path, message):
    data = topic_data()
    change(data)
    error = only_error(tmp_path, data)
    assert error.startswith(f"{FILE}: questions[0] (kv-why) > {path}: "), error
    assert message in error


def test_a_follow_up_takes_one_to_three_points_and_may_omit_the_check(tmp_path):
    data = topic_data()
    rubric = scenario(data)["follow_ups"][1]["rubric"]
    rubric.extend([{"text": "Two"}, {"text": "Three"}])
    assert errors_for(tmp_path, data) == []
    rubric.append({"text": "Four"})
    error = only_error(tmp_path, data)
    assert "questions[0] (kv-why) > follow_ups[1] > rubric: List should have at most 3" in error


def test_a_published_scenario_refuses_a_point_without_claims_or_check(tmp_path):
    data = topic_data()
    del point(data, 2)["claims"]
    del point(data, 3)["check"]
    assert errors_for(tmp_path, data) == [
        f"{FILE}: question kv-why, rubric point {i}: a published scenario question needs "
        "`claims` and a `check` on every non-penalty point (docs/BANK_FORMAT.md)"
        for i in (2, 3)
    ]


def test_the_rule_covers_design_questions_but_not_penalty_points(tmp_path):
    data = topic_data()
    scenario(data)["kind"] = "design"
    assert "claims" not in point(data, 4) and point(data, 4)["penalty"]
    assert errors_for(tmp_path, data) == []
    point(data, 0).pop("check")
    assert only_error(tmp_path, data) == (
        f"{FILE}: question kv-why, rubric point 0: a published design question needs `claims` "
        "and a `check` on every non-penalty point (docs/BANK_FORMAT.md)"
    )


def test_drafts_and_old_format_questions_may_omit_every_new_field(tmp_path):
    data = topic_data()
    question = scenario(data)
    question["status"] = "draft"
    question.pop("variables")
    question["follow_ups"] = ["And MLA?", "And at 128K?"]
    question["rubric"] = [
        {"text": p["text"], "weight": p.get("weight", 1), "penalty": p.get("penalty", False)}
        for p in question["rubric"]
    ]
    assert errors_for(tmp_path, data) == []
    question["status"] = "published"
    assert len(errors_for(tmp_path, data)) == 4  # the four earning points


def test_the_real_bank_states_the_rule_for_each_unauthored_point():
    """Every message the real bank gives is either none or the refusal rule (until authored)."""
    others = [str(e) for e in read_bank().errors if "rubric point" not in e.path]
    assert others == []


def test_a_catalog_choice_that_is_not_a_slug_is_an_error_not_a_crash(tmp_path):
    data = topic_data()
    scenario(data)["variables"]["model"]["choices"] = [["llama-3-70b"]]
    error = only_error(tmp_path, data)
    assert error.startswith(f"{FILE}: questions[0] (kv-why) > variables > model: ")
    assert "catalog choices must be catalog slugs (text)" in error
