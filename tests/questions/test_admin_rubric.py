"""The admin edits rubric metadata, question variables and follow-ups with the bank's own
checks: a bad check or an expression that does not evaluate is a form error, not a 500."""

from __future__ import annotations

import json

import pytest
from bankfiles import write_topic

from questions.bank import read_bank
from questions.models import Question
from questions.services import bank_load
from trainer.demo import DEMO_AUTHOR, demo_users_ensure

pytestmark = pytest.mark.django_db

QUESTION_FIELDS = (
    "slug", "kind", "title", "prompt", "difficulty", "model_answer", "status", "order",
)  # fmt: skip
JSON_FIELDS = ("competencies", "follow_ups", "related_labs", "sources", "variables")
POINT_JSON = ("concepts", "claims", "contradictions", "key_terms", "expects", "check_spec")


@pytest.fixture
def question(tmp_path):
    bank = read_bank([write_topic(tmp_path)])
    assert not bank.errors, bank.errors
    bank_load(bank)
    return Question.objects.get(slug="kv-why")


@pytest.fixture
def author_client(client):
    demo_users_ensure()
    assert client.login(username=DEMO_AUTHOR.username, password=DEMO_AUTHOR.password)
    return client


def form_data(question: Question) -> dict:
    """The change form as the admin renders it for `question`, unchanged."""
    data = {name: getattr(question, name) for name in QUESTION_FIELDS}
    data["topic"] = question.topic_id
    data.update({name: json.dumps(getattr(question, name)) for name in JSON_FIELDS})
    points = list(question.rubric.all())
    data.update(
        {
            "rubric-TOTAL_FORMS": str(len(points)),
            "rubric-INITIAL_FORMS": str(len(points)),
            "rubric-MIN_NUM_FORMS": "0",
            "rubric-MAX_NUM_FORMS": "1000",
        }
    )
    for i, p in enumerate(points):
        data.update(
            {
                f"rubric-{i}-id": p.pk,
                f"rubric-{i}-question": question.pk,
                f"rubric-{i}-order": p.order,
                f"rubric-{i}-text": p.text,
                f"rubric-{i}-weight": p.weight,
                f"rubric-{i}-penalty": "on" if p.penalty else "",
            }
        )
        data.update({f"rubric-{i}-{n}": json.dumps(getattr(p, n)) for n in POINT_JSON})
    return {k: v for k, v in data.items() if v != ""}


def post(client, question, data):
    return client.post(f"/admin/questions/question/{question.pk}/change/", data)


def test_the_change_page_shows_the_metadata_with_an_example(author_client, question):
    html = author_client.get(f"/admin/questions/question/{question.pk}/change/").content.decode()
    assert 'name="rubric-0-claims"' in html and 'name="rubric-0-check_spec"' in html
    assert 'name="variables"' in html
    assert "Which phase is compute-bound at batch 1?" in html  # the check's help text


def test_an_unchanged_question_saves(author_client, question):
    response = post(author_client, question, form_data(question))
    assert response.status_code == 302, response.content.decode()[:3000]


def test_a_check_edited_in_the_admin_is_stored(author_client, question):
    data = form_data(question)
    check = {"ask": "How many KV heads?", "number": "8 ±0%"}
    data["rubric-1-check_spec"] = json.dumps(check)
    data["rubric-2-claims"] = json.dumps(["Paging removes external fragmentation."])
    assert post(author_client, question, data).status_code == 302
    points = list(question.rubric.all())
    assert points[1].check_spec == check
    assert points[2].claims == ["Paging removes external fragmentation."]
    assert points[1].as_point()["check"]["number"] == {
        "value": 8.0,
        "unit": "",
        "tol": 0.0,
        "label": "",
    }


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rubric-0-check_spec", {"ask": "Which?"}, "give exactly one of `answer`"),
        (
            "rubric-0-check_spec",
            {"ask": "Which?", "answer": "KV", "options": []},
            "a multiple-choice check needs at least 2 options in all",
        ),
        ("rubric-0-claims", ["a", "b", "c", "d"], "List should have at most 3 items"),
        ("rubric-1-expects", ["320 KiX"], "unknown unit &#x27;KiX&#x27;"),
        (
            "rubric-1-check_spec",
            {"ask": "KiB?", "number": {"expr": "gpu_memory", "unit": "GB"}},
            "unknown name &#x27;gpu_memory&#x27;",
        ),
        ("rubric-0-check_spec", "not a dict", "Input should be a valid dictionary"),
    ],
)
def test_a_bad_point_is_a_form_error(author_client, question, field, value, message):
    before = [p.point_dict() for p in question.rubric.all()]
    data = form_data(question)
    data[field] = json.dumps(value)
    response = post(author_client, question, data)
    html = response.content.decode()
    assert response.status_code == 200  # re-rendered with the reason, not saved
    assert message in html
    assert [p.point_dict() for p in question.rubric.all()] == before


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "variables",
            {"model": {"catalog": "models", "choices": ["llama-3-70b", "llama-3-8b"]}},
            "variable &#x27;model&#x27; takes 2 values",
        ),
        ("variables", {"tp": {"valu": 4}}, "variables &gt; tp &gt; valu: is not a known field"),
        (
            "follow_ups",
            [{"prompt": "And?", "rubric": [{"text": "x", "expects": ["4 widgets"]}]}],
            "follow_ups[0] &gt; rubric[0] &gt; expects[0]: unknown unit",
        ),
        ("follow_ups", [{"rubric": []}], "follow_ups[0] &gt; prompt: Field required"),
    ],
)
def test_bad_variables_or_follow_ups_are_form_errors(
    author_client, question, field, value, message
):
    data = form_data(question)
    data[field] = json.dumps(value)
    response = post(author_client, question, data)
    assert response.status_code == 200
    assert message in response.content.decode()


def test_follow_ups_typed_as_strings_are_stored_as_objects(author_client, question):
    data = form_data(question)
    data["follow_ups"] = json.dumps(["Why not MQA?"])
    assert post(author_client, question, data).status_code == 302
    question.refresh_from_db()
    assert question.follow_ups == [{"prompt": "Why not MQA?", "rubric": []}]
