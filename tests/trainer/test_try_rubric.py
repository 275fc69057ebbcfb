"""Staff try a question's rubric on sample answers (admin action -> page), graded by the same
function as `manage grade_answers`."""

from __future__ import annotations

import pytest

from questions.models import Question, RubricPoint, Topic

pytestmark = pytest.mark.django_db


@pytest.fixture
def question():
    topic = Topic.objects.create(slug="kv-cache-basics", title="KV cache", order=1)
    q = Question.objects.create(
        topic=topic,
        slug="what-the-cache-holds",
        kind="scenario",
        title="What is cached",
        prompt="What does the KV cache store, and why?",
        status="draft",
    )
    RubricPoint.objects.create(
        question=q,
        order=0,
        weight=1,
        text="The KV cache stores each past token's keys and values for every layer, not the queries.",
        claims=["The cache holds the keys and values of earlier tokens, per layer."],
        contradictions=["The KV cache stores the queries."],
        key_terms=["keys | key", "values | value"],
    )
    return q


@pytest.fixture
def staff(client, django_user_model):
    user = django_user_model.objects.create_user(
        "author", password="pw-author-123", is_staff=True, is_superuser=True
    )
    client.force_login(user)
    return client


def test_the_admin_action_leads_to_the_try_page(staff, question):
    response = staff.post(
        "/admin/questions/question/",
        {"action": "try_rubric_action", "_selected_action": [question.pk]},
    )
    assert response.status_code == 302
    assert response["Location"] == f"/admin/try-rubric/{question.pk}/"


def test_sample_answers_are_graded_point_by_point(staff, question):
    answers = (
        "The KV cache keeps the keys and values of every earlier token for each layer, so they are "
        "not recomputed.\n---\nIt caches HTTP responses at the edge so repeated prompts are fast."
    )
    page = staff.post(f"/admin/try-rubric/{question.pk}/", {"answers": answers})
    html = page.content.decode()
    assert page.status_code == 200
    assert "Answer 1: 100%" in html and "Answer 2: 0%" in html
    assert html.count('class="verdict-hit"') == 1


def test_no_answers_is_a_clear_error(staff, question):
    page = staff.post(f"/admin/try-rubric/{question.pk}/", {"answers": " \n---\n "})
    assert page.status_code == 400
    assert "Paste at least one answer" in page.content.decode()


def test_learners_cannot_use_it(client, question, django_user_model):
    client.force_login(django_user_model.objects.create_user("learner", password="pw-learner-123"))
    response = client.get(f"/admin/try-rubric/{question.pk}/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
