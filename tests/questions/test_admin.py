"""Admin authoring: authors only, live preview with a variant, validation on save, export."""

from __future__ import annotations

import json

import pytest
import yaml
from bankfiles import write_topic
from django.contrib.auth import get_user_model

from questions.bank import read_bank
from questions.models import Misconception, Question, Step
from questions.services import bank_load
from trainer.demo import DEMO_AUTHOR, demo_users_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def loaded(tmp_path):
    bank = read_bank([write_topic(tmp_path)])
    assert not bank.errors, bank.errors
    bank_load(bank)
    return Question.objects.get(slug="kv-70b")


@pytest.fixture
def author_client(client):
    demo_users_ensure()
    assert client.login(username=DEMO_AUTHOR.username, password=DEMO_AUTHOR.password)
    return client


SAME_AS_ANSWER = "dtype_bytes * 2 * model_layers * model_kv_heads * model_head_dim"


def test_a_learner_cannot_reach_the_admin_or_the_preview(client, loaded):
    get_user_model().objects.create_user("learner2", password="decode-bound-7")
    client.login(username="learner2", password="decode-bound-7")
    for url in (
        "/admin/",
        f"/admin/questions/question/{loaded.pk}/change/",
        "/admin/questions/question/preview/",
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_staff_without_author_permissions_gets_403_on_the_preview(client, loaded):
    get_user_model().objects.create_user("ops", password="decode-bound-7", is_staff=True)
    client.login(username="ops", password="decode-bound-7")
    assert (
        client.post("/admin/questions/question/preview/", {"object_id": loaded.pk}).status_code
        == 403
    )


def test_the_change_page_carries_the_live_preview(author_client, loaded):
    html = author_client.get(f"/admin/questions/question/{loaded.pk}/change/").content.decode()
    assert 'hx-post="/admin/questions/question/preview/"' in html
    assert "/static/vendor/htmx.min.js" in html


def test_preview_renders_the_typed_prompt_sanitised_and_a_solved_variant(author_client, loaded):
    response = author_client.post(
        "/admin/questions/question/preview/",
        {
            "object_id": loaded.pk,
            "prompt": "**Bold** <script>alert(1)</script><img src=x onerror=alert(2)>",
        },
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "<strong>Bold</strong>" in html
    assert "<script" not in html and "onerror" not in html
    assert "Reference answer:" in html
    # Llama-3-70B or Llama-3-8B: both have 8 KV heads x 128 head_dim, so the cache per token
    # differs only by layers (80 -> 320 KiB, 32 -> 128 KiB).
    assert "320 KiB" in html or "128 KiB" in html


def test_saving_a_step_with_the_wrong_unit_is_refused_with_the_reason(author_client, loaded):
    problem = loaded.problem
    step = problem.steps.get(name="kv_per_token")
    data = {
        "steps-TOTAL_FORMS": "2",
        "steps-INITIAL_FORMS": "2",
        "steps-MIN_NUM_FORMS": "0",
        "steps-MAX_NUM_FORMS": "1000",
        "parameters": json.dumps(problem.parameters),
        "condition": problem.condition,
        "question": loaded.pk,
    }
    for i, s in enumerate(problem.steps.all()):
        data.update(
            {
                f"steps-{i}-id": s.pk,
                f"steps-{i}-problem": problem.pk,
                f"steps-{i}-order": s.order,
                f"steps-{i}-name": s.name,
                f"steps-{i}-prompt": s.prompt,
                f"steps-{i}-expression": s.expression,
                f"steps-{i}-unit": "GB/s" if s.pk == step.pk else s.unit,
                f"steps-{i}-rtol": s.rtol,
                f"steps-{i}-atol": s.atol,
                f"steps-{i}-hints": "[]",
                f"steps-{i}-explanation": s.explanation,
            }
        )
    response = author_client.post(f"/admin/questions/problem/{problem.pk}/change/", data)
    html = response.content.decode()
    assert response.status_code == 200  # re-rendered with errors, not saved
    assert "the unit is &#x27;GB/s&#x27; (a rate of data (bandwidth))" in html
    assert "but the expression yields B (a memory size)" in html
    step.refresh_from_db()
    assert step.unit == "KiB"


def test_a_misconception_equal_to_the_answer_is_refused(author_client, loaded):
    step = Step.objects.get(problem__question=loaded, name="kv_per_token")
    existing = list(step.misconceptions.all())
    data = {
        "misconceptions-TOTAL_FORMS": str(len(existing) + 1),
        "misconceptions-INITIAL_FORMS": str(len(existing)),
        "misconceptions-MIN_NUM_FORMS": "0",
        "misconceptions-MAX_NUM_FORMS": "1000",
        "problem": step.problem_id,
        "order": step.order,
        "name": step.name,
        "prompt": step.prompt,
        "expression": step.expression,
        "unit": step.unit,
        "rtol": step.rtol,
        "atol": step.atol,
        "hints": "[]",
        "explanation": step.explanation,
    }
    for i, m in enumerate(existing):
        data.update(
            {
                f"misconceptions-{i}-id": m.pk,
                f"misconceptions-{i}-step": step.pk,
                f"misconceptions-{i}-order": m.order,
                f"misconceptions-{i}-expression": m.expression,
                f"misconceptions-{i}-feedback": m.feedback,
            }
        )
    n = len(existing)
    data.update(
        {
            f"misconceptions-{n}-step": step.pk,
            f"misconceptions-{n}-order": n,
            f"misconceptions-{n}-expression": SAME_AS_ANSWER,
            f"misconceptions-{n}-feedback": "Same as the answer, written another way.",
        }
    )
    response = author_client.post(f"/admin/questions/step/{step.pk}/change/", data)
    assert response.status_code == 200
    assert "a misconception must differ beyond the step" in response.content.decode()
    assert Misconception.objects.filter(step=step).count() == n


def test_export_selected_questions_as_bank_yaml(author_client, loaded):
    response = author_client.post(
        "/admin/questions/question/",
        {"action": "export_questions_yaml", "_selected_action": [loaded.pk]},
    )
    assert response["Content-Disposition"].startswith("attachment;")
    document = yaml.safe_load(response.content)
    assert document["topic"]["slug"] == "kv-cache-arithmetic"
    assert [q["slug"] for q in document["questions"]] == ["kv-70b"]
    assert document["questions"][0]["problem"]["steps"][0]["name"] == "kv_per_token"
