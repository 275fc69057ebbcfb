"""load_bank: every error class is reported with file, path and reason; nothing loads when
any file is wrong; upserts are idempotent and never delete learners' attempts."""

from __future__ import annotations

import pytest
import yaml
from bankfiles import topic_data, write_topic
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from questions.bank import read_bank
from questions.models import Question, Topic
from trainer.models import Attempt

SAME_AS_ANSWER = "dtype_bytes * 2 * model_layers * model_kv_heads * model_head_dim"


def errors_for(tmp_path, data, name=None) -> list[str]:
    return [str(e) for e in read_bank([write_topic(tmp_path, data, name)]).errors]


def only_error(tmp_path, data, name=None) -> str:
    errors = errors_for(tmp_path, data, name)
    assert len(errors) == 1, errors
    return errors[0]


def arithmetic(data):
    return data["questions"][1]


def test_the_sample_file_is_valid(tmp_path):
    assert errors_for(tmp_path, topic_data()) == []


def test_wrong_dimension_names_file_question_step_and_both_units(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["steps"][0]["unit"] = "GB/s"
    assert only_error(tmp_path, data) == (
        "kv-cache-arithmetic.yaml: questions[1] (kv-70b) > problem > steps[0] (kv_per_token) > "
        "unit: the unit is 'GB/s' (a rate of data (bandwidth)) but the expression yields B "
        "(a memory size)"
    )


def test_unknown_catalog_model(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["parameters"]["model"]["choices"].append("llama-5-9000b")
    message = only_error(tmp_path, data)
    assert "questions[1] (kv-70b) > problem > parameters > model" in message
    assert "no entry 'llama-5-9000b'" in message


def test_expression_that_does_not_parse(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["steps"][1]["expression"] = "kv_per_token * * context"
    message = only_error(tmp_path, data)
    assert "steps[1] (kv_per_seq) > expression" in message
    assert "does not parse" in message


def test_unknown_variable_gets_a_suggestion(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["steps"][0]["expression"] = "2 * model_layers * model_kv_head"
    message = only_error(tmp_path, data)
    assert "steps[0] (kv_per_token) > expression" in message
    assert "'model_kv_head'" in message


def test_step_referencing_a_later_step(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["steps"][0]["expression"] = "kv_per_seq / 2"
    message = only_error(tmp_path, data)
    assert (
        "steps[0] (kv_per_token) > expression: uses 'kv_per_seq', which step 1 computes" in message
    )


def test_duplicate_slug_across_files(tmp_path):
    first = topic_data()
    second = topic_data()
    second["topic"]["slug"] = "paged-attention"
    second["questions"] = [second["questions"][0]]
    paths = [write_topic(tmp_path, first), write_topic(tmp_path, second)]
    errors = [str(e) for e in read_bank(paths).errors]
    assert errors == [
        "paged-attention.yaml: questions[0] (kv-why) > slug: duplicate slug 'kv-why': already "
        "used in kv-cache-arithmetic.yaml"
    ]


def test_unknown_field(tmp_path):
    data = topic_data()
    data["questions"][0]["rubrik"] = []
    message = only_error(tmp_path, data)
    assert message.startswith("kv-cache-arithmetic.yaml: questions[0] (kv-why) > rubrik:")
    assert "is not a known field" in message


def test_topic_slug_must_match_the_file(tmp_path):
    message = only_error(tmp_path, topic_data(), name="kv-cache.yaml")
    assert (
        "kv-cache.yaml: topic > slug: is 'kv-cache-arithmetic' but the file is kv-cache.yaml"
        in message
    )


def test_unknown_unit(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["steps"][1]["unit"] = "GiBB"
    message = only_error(tmp_path, data)
    assert "steps[1] (kv_per_seq) > unit: unknown unit" in message


def test_a_misconception_equal_to_the_answer(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["steps"][0]["misconceptions"].append(
        {
            "expression": SAME_AS_ANSWER,
            "feedback": "same thing",
        }
    )
    message = only_error(tmp_path, data)
    assert "misconceptions[2] > expression: gives the correct answer" in message


def test_a_condition_no_variant_meets(tmp_path):
    data = topic_data()
    arithmetic(data)["problem"]["condition"] = "context > 1000000 token"
    message = only_error(tmp_path, data)
    assert "problem > condition: no combination of parameters satisfies" in message


def test_a_step_name_that_is_a_unit(tmp_path):
    data = topic_data()
    steps = arithmetic(data)["problem"]["steps"]
    steps[1]["name"] = "s"
    message = only_error(tmp_path, data)
    assert "steps[1] (s) > name: the name 's' is already a unit" in message


def test_an_arithmetic_question_needs_a_problem(tmp_path):
    data = topic_data()
    del arithmetic(data)["problem"]
    assert "an arithmetic question needs a `problem`" in only_error(tmp_path, data)


def test_invalid_yaml_names_the_line(tmp_path):
    path = tmp_path / "kv-cache-arithmetic.yaml"
    path.write_text("topic:\n  slug: [unclosed\n", encoding="utf-8")
    (message,) = [str(e) for e in read_bank([path]).errors]
    assert message.startswith("kv-cache-arithmetic.yaml: line ")
    assert "is not valid YAML" in message


def test_a_loop_naming_a_missing_question(tmp_path):
    loops = tmp_path / "loops.yaml"
    loops.write_text(
        "loops:\n- slug: warm-up\n  title: Warm-up\n  items:\n  - {question: nope, minutes: 5}\n"
    )
    errors = [str(e) for e in read_bank([write_topic(tmp_path), loops]).errors]
    assert errors == [
        "loops.yaml: loops[0] (warm-up) > items[0] > question: no question with slug 'nope' in the bank"
    ]


@pytest.mark.django_db
def test_nothing_is_loaded_when_any_file_is_wrong(tmp_path):
    good = write_topic(tmp_path)
    bad = topic_data()
    bad["topic"]["slug"] = "paged-attention"
    bad["questions"] = [arithmetic(bad)]
    bad["questions"][0]["slug"] = "paged-1"
    bad["questions"][0]["problem"]["steps"][0]["unit"] = "GB/s"
    with pytest.raises(CommandError, match="1 error"):
        call_command("load_bank", str(good), str(write_topic(tmp_path, bad)))
    assert Topic.objects.count() == 0 and Question.objects.count() == 0


@pytest.mark.django_db
def test_load_is_an_idempotent_upsert_that_keeps_attempts(tmp_path, capsys):
    path = write_topic(tmp_path)
    call_command("load_bank", str(path))
    assert "questions: 2 created, 0 updated, 0 unchanged" in capsys.readouterr().out
    call_command("load_bank", str(path))
    assert "questions: 0 created, 0 updated, 2 unchanged" in capsys.readouterr().out

    learner = get_user_model().objects.create_user("ada")
    question = Question.objects.get(slug="kv-70b")
    Attempt.objects.create(user=learner, question=question, answer="320 KiB")
    rubric_ids = list(Question.objects.get(slug="kv-why").rubric.values_list("id", flat=True))

    data = topic_data()
    arithmetic(data)["title"] = "KV per token, per sequence"
    data["questions"][0]["rubric"][0]["weight"] = 3
    call_command("load_bank", str(write_topic(tmp_path, data)))
    assert "questions: 0 created, 2 updated, 0 unchanged" in capsys.readouterr().out
    assert Attempt.objects.filter(question=question).count() == 1
    assert Question.objects.get(slug="kv-70b").title == "KV per token, per sequence"
    # Rubric points are updated in place, so anything pointing at them stays valid.
    assert (
        list(Question.objects.get(slug="kv-why").rubric.values_list("id", flat=True)) == rubric_ids
    )


def sequences_step(data, integer):
    steps = arithmetic(data)["problem"]["steps"]
    steps.append(
        {
            "name": "fits",
            "prompt": "How many sequences fit in 80 GB?",
            "expression": "80 GB / kv_per_seq",
            "unit": "",
            "integer": integer,
            "misconceptions": [{"expression": "80 GB / kv_per_seq + 0.4", "feedback": "x"}],
        }
    )
    return steps[-1]


def test_integer_must_be_floor_ceil_or_round(tmp_path):
    data = topic_data()
    sequences_step(data, "truncate")
    message = only_error(tmp_path, data)
    assert "steps[2] (fits) > integer: Input should be 'floor', 'ceil' or 'round'" in message


def test_a_misconception_that_rounds_to_the_answer_is_reported(tmp_path):
    data = topic_data()
    sequences_step(data, "floor")  # + 0.4 sequences is a different number, not a different count
    message = only_error(tmp_path, data)
    assert "steps[2] (fits) > misconceptions[0] > expression: gives the correct answer" in message


@pytest.mark.django_db
def test_integer_round_trips_through_the_database(tmp_path):
    from questions.models import Step
    from questions.services import question_dict

    data = topic_data()
    step = sequences_step(data, "ceil")
    step["misconceptions"][0]["expression"] = "80 GB / kv_per_seq * 2"
    call_command("load_bank", str(write_topic(tmp_path, data)))
    assert Step.objects.get(name="fits").integer == "ceil"
    assert Step.objects.get(name="kv_per_seq").integer == ""
    exported = question_dict(Question.objects.get(slug="kv-70b"))["problem"]["steps"]
    assert exported[2]["integer"] == "ceil" and "integer" not in exported[1]


SOURCE = {
    "ref": "vLLM paper (Kwon et al., SOSP 2023), §7.1",
    "url": "https://arxiv.org/abs/2309.06180",
    "quote": "the attention kernel has 20-26% higher latency (paraphrase)",
    "checked": "2026-12-01",
}


def with_source(**changes):
    data = topic_data()
    source = {**SOURCE, **changes}
    data["questions"][0]["sources"] = [{k: v for k, v in source.items() if v is not None}]
    return data


def test_a_source_without_a_url_is_valid(tmp_path):
    assert errors_for(tmp_path, with_source(url=None)) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"quote": None}, "sources[0] > quote: Field required"),
        ({"quote": "  "}, "sources[0] > quote: is empty: give the sentence relied on"),
        ({"ref": ""}, "sources[0] > ref: is empty: name the source"),
        ({"url": "arxiv.org/abs/1"}, "sources[0] > url: 'arxiv.org/abs/1' is not a web address"),
        ({"checked": "3 Dec 2026"}, "sources[0] > checked: '3 Dec 2026' is not a date"),
        ({"checked": "2999-01-01"}, "sources[0] > checked: 2999-01-01 is in the future"),
        ({"ref": "x" * 301}, "sources[0] > ref: String should have at most 300 characters"),
    ],
)
def test_a_bad_source_is_named_with_its_field(tmp_path, changes, expected):
    message = only_error(tmp_path, with_source(**changes))
    assert message.startswith("kv-cache-arithmetic.yaml: questions[0] (kv-why) > sources[0] > ")
    assert expected in message


def test_a_yaml_date_is_accepted_as_checked(tmp_path):
    path = tmp_path / "kv-cache-arithmetic.yaml"
    text = write_topic(tmp_path, with_source()).read_text(encoding="utf-8")
    path.write_text(text.replace("'2026-12-01'", "2026-12-01"), encoding="utf-8")
    bank = read_bank([path])
    assert bank.errors == []
    assert str(bank.questions[0].sources[0].checked) == "2026-12-01"


@pytest.mark.django_db
def test_sources_load_export_and_load_back_unchanged(tmp_path, capsys):
    data = with_source()
    data["questions"][0]["sources"].append({**SOURCE, "url": None, "ref": "FlashAttention-3"})
    del data["questions"][0]["sources"][1]["url"]
    call_command("load_bank", str(write_topic(tmp_path, data)))
    stored = Question.objects.get(slug="kv-why").sources
    assert stored == [
        SOURCE,
        {k: v for k, v in SOURCE.items() if k != "url"} | {"ref": "FlashAttention-3"},
    ]
    assert Question.objects.get(slug="kv-70b").sources == []
    out = tmp_path / "out"
    call_command("export_bank", out=out)
    exported = yaml.safe_load((out / "kv-cache-arithmetic.yaml").read_text(encoding="utf-8"))
    assert exported["questions"][0]["sources"][0] == SOURCE
    assert "sources" not in exported["questions"][1]  # an empty list is left out
    capsys.readouterr()
    call_command("load_bank", str(out / "kv-cache-arithmetic.yaml"))
    assert "questions: 0 created, 0 updated, 2 unchanged" in capsys.readouterr().out
    data["questions"][0]["sources"][0]["quote"] = "a corrected quote"
    call_command("load_bank", str(write_topic(tmp_path, data)))
    assert "questions: 0 created, 1 updated, 1 unchanged" in capsys.readouterr().out
    assert Question.objects.get(slug="kv-why").sources[0]["quote"] == "a corrected quote"


@pytest.mark.django_db
def test_steps_may_be_dropped_or_renamed_between_loads(tmp_path, capsys):
    """Rows are updated in place by position: a name moving to another row must not trip
    the unique (problem, name) constraint (found by the bank fuzzer)."""
    from questions.models import Step

    data = topic_data()
    steps = arithmetic(data)["problem"]["steps"]
    steps.insert(0, {**steps[0], "name": "kv_first"})
    call_command("load_bank", str(write_topic(tmp_path, data)))
    del steps[0]  # kv_per_token moves from row 1 to row 0, kv_per_seq from row 2 to row 1
    call_command("load_bank", str(write_topic(tmp_path, data)))
    assert "1 updated" in capsys.readouterr().out
    names = list(
        Step.objects.filter(problem__question__slug="kv-70b").values_list("name", flat=True)
    )
    assert names == ["kv_per_token", "kv_per_seq"]
