"""Rubric point metadata in the database: load -> export -> load keeps every field,
as_point() evaluates numbers against the question's variables, version() follows the
point's content, and old follow-up strings migrate to objects."""

from __future__ import annotations

import pytest
import yaml
from bankfiles import topic_data, write_topic
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from questions import rubric_points
from questions.models import Question, RubricPoint

KV_PER_TOKEN_KIB = 2 * 80 * 8 * 128 * 2 / 1024  # Llama-3-70B in BF16: 320 KiB


@pytest.fixture
def loaded(tmp_path, db):
    call_command("load_bank", str(write_topic(tmp_path)))
    return Question.objects.get(slug="kv-why")


@pytest.mark.django_db
def test_every_field_survives_load_export_load(tmp_path, capsys):
    source = topic_data()
    call_command("load_bank", str(write_topic(tmp_path, source)))
    first, second = tmp_path / "first", tmp_path / "second"
    call_command("export_bank", out=first)
    exported = yaml.safe_load((first / "kv-cache-arithmetic.yaml").read_text(encoding="utf-8"))
    question = exported["questions"][0]
    original = source["questions"][0]
    assert question["variables"] == original["variables"]
    assert question["follow_ups"] == original["follow_ups"]  # a string stays a string
    for got, want in zip(question["rubric"], original["rubric"], strict=True):
        for name in ("claims", "contradictions", "key_terms", "check"):
            assert got.get(name) == want.get(name), (name, want["text"])
    assert question["rubric"][1]["expects"][1] == {
        "expr": "2 * model_layers * model_kv_heads * model_head_dim * dtype_bytes",
        "unit": "KiB",
        "tol": "5%",
        "label": "KV per token",
    }
    capsys.readouterr()
    call_command("load_bank", str(first / "kv-cache-arithmetic.yaml"))
    assert "questions: 0 created, 0 updated, 2 unchanged" in capsys.readouterr().out
    call_command("export_bank", out=second)
    for name in ("kv-cache-arithmetic.yaml",):
        assert (first / name).read_bytes() == (second / name).read_bytes()


@pytest.mark.django_db
def test_a_changed_check_is_an_update(tmp_path, capsys):
    data = topic_data()
    call_command("load_bank", str(write_topic(tmp_path, data)))
    data["questions"][0]["rubric"][0]["check"]["ask"] = "Which heads does GQA cache?"
    capsys.readouterr()
    call_command("load_bank", str(write_topic(tmp_path, data)))
    assert "questions: 0 created, 1 updated, 1 unchanged" in capsys.readouterr().out
    point = Question.objects.get(slug="kv-why").rubric.first()
    assert point.check_spec["ask"] == "Which heads does GQA cache?"


def test_as_point_evaluates_expects_and_checks_against_the_variables(loaded):
    first, second, third, fourth, penalty = (p.as_point() for p in loaded.rubric.all())
    assert first["check"] == {
        "kind": "choice",
        "ask": "Which heads are cached?",
        "answer": "The KV heads",
        "options": ["Every attention head caches its own K and V."],  # the contradictions
    }
    assert second["expects"] == [
        {"value": 8.0, "unit": "", "tol": 0.1, "label": "query heads per KV head"},
        {"value": KV_PER_TOKEN_KIB, "unit": "KiB", "tol": 0.05, "label": "KV per token"},
    ]
    assert second["check"]["kind"] == "number"
    assert second["check"]["number"] == {
        "value": KV_PER_TOKEN_KIB,
        "unit": "KiB",
        "tol": 0.05,
        "label": "",
    }
    assert third["check"]["options"] == ["GQA", "Bigger batches"]
    assert fourth["check"]["number"] == {"value": 160.0, "unit": "KiB", "tol": 0.1, "label": ""}
    assert penalty["penalty"] is True and penalty["check"] is None and penalty["claims"] == []
    assert set(first) == {
        "text", "weight", "penalty", "concepts", "claims", "contradictions", "key_terms",
        "expects", "check", "rubric_version",
    }  # fmt: skip
    assert first["rubric_version"] == loaded.rubric.first().version()


def test_question_points_and_resolved_expects_match_as_point(loaded):
    from questions.services import question_points, resolved_expects

    assert question_points(loaded) == [p.as_point() for p in loaded.rubric.all()]
    assert resolved_expects(loaded, ["model_layers", "2 GiB ±1%"]) == [
        {"value": 80.0, "unit": "", "tol": 0.1, "label": ""},
        {"value": 2.0, "unit": "GiB", "tol": 0.01, "label": ""},
    ]


def test_follow_up_items_and_their_points(loaded):
    plain, probed = loaded.follow_up_items()
    assert plain == {"prompt": "And MLA?", "rubric": []}
    assert loaded.follow_up_prompts() == ["And MLA?", "And at 128K?"]
    assert probed["rubric"][0]["claims"] == ["KV cache grows linearly with context length."]
    point = loaded.follow_up_point(1, 0)
    assert point["expects"] == [{"value": 40.0, "unit": "GiB", "tol": 0.05, "label": ""}]
    assert point["check"] is None and point["weight"] == 1.0


def test_gb_and_gib_are_different_units():
    gb = rubric_points.resolve_number("80 GB", {})
    gib = rubric_points.resolve_number({"expr": "80 GB", "unit": "GiB"}, {})
    assert gb["unit"] == "GB" and gb["value"] == 80.0
    assert gib["unit"] == "GiB" and gib["value"] == pytest.approx(74.506, rel=1e-4)


def test_version_follows_text_weight_and_metadata(loaded):
    point = loaded.rubric.first()
    version = point.version()
    assert len(version) == 12 and int(version, 16) >= 0
    assert RubricPoint.objects.get(pk=point.pk).version() == version  # stable across loads
    for name, value in [
        ("text", "Caches KV heads only"),
        ("weight", 3.0),
        ("penalty", True),
        ("concepts", ["GQA"]),
        ("claims", ["KV heads are shared by query groups."]),
        ("contradictions", []),
        ("key_terms", ["GQA"]),
        ("expects", ["8"]),
        ("check_spec", {"ask": "How many KV heads?", "number": "8"}),
    ]:
        changed = RubricPoint.objects.get(pk=point.pk)
        setattr(changed, name, value)
        assert changed.version() != version, name
    # A follow-up point hashes the same way from its dict.
    follow_up = loaded.follow_up_items()[1]["rubric"][0]
    assert rubric_points.point_version(follow_up) == rubric_points.point_version(
        {**follow_up, "weight": 1}
    )
    assert rubric_points.point_version(follow_up) != rubric_points.point_version(
        {**follow_up, "key_terms": []}
    )


def test_old_follow_up_strings_still_read(loaded):
    Question.objects.filter(pk=loaded.pk).update(follow_ups=["Why not MQA?"])
    loaded.refresh_from_db()
    assert loaded.follow_up_items() == [{"prompt": "Why not MQA?", "rubric": []}]


@pytest.mark.django_db(transaction=True)
def test_the_migration_turns_old_follow_up_strings_into_objects():
    executor = MigrationExecutor(connection)
    before, after = (
        [("questions", "0004_rubric_point_metadata")],
        [("questions", "0005_follow_up_objects")],
    )
    executor.migrate(before)
    old = MigrationExecutor(connection).loader.project_state(before).apps
    topic = old.get_model("questions", "Topic").objects.create(slug="t", title="T")
    OldQuestion = old.get_model("questions", "Question")
    kinds = {"topic": topic, "kind": "scenario", "prompt": "p"}
    OldQuestion.objects.create(slug="a", title="A", follow_ups=["And MLA?", "And 128K?"], **kinds)
    OldQuestion.objects.create(slug="b", title="B", follow_ups=[], **kinds)
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    new = executor.loader.project_state(after).apps.get_model("questions", "Question")
    assert new.objects.get(slug="a").follow_ups == [
        {"prompt": "And MLA?", "rubric": []},
        {"prompt": "And 128K?", "rubric": []},
    ]
    assert new.objects.get(slug="b").follow_ups == []
    executor = MigrationExecutor(connection)
    executor.migrate(before)  # and back
    old = executor.loader.project_state(before).apps.get_model("questions", "Question")
    assert old.objects.get(slug="a").follow_ups == ["And MLA?", "And 128K?"]
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
