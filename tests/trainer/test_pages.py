"""Sign-up, log-in, log-out and the home page (full page and its htmx partial)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from questions.models import Question, Topic

pytestmark = pytest.mark.django_db


def test_home_shows_an_empty_state_without_topics(client):
    page = client.get("/").content.decode()
    assert "No topics yet" in page
    assert "load_bank" in page


def test_home_lists_topics_with_published_question_counts(client):
    topic = Topic.objects.create(
        slug="kv-cache", title="KV cache", summary="Bytes per token", order=1
    )
    Topic.objects.create(slug="batching", title="Continuous batching", order=2)
    for status in ("published", "published", "draft"):
        Question.objects.create(
            topic=topic,
            slug=f"q-{status}-{Question.objects.count()}",
            kind="scenario",
            title="t",
            prompt="p",
            status=status,
        )
    page = client.get("/").content.decode()
    assert page.index("KV cache") < page.index("Continuous batching")
    assert "2 questions" in page  # the draft is not counted
    assert "0 questions" in page


def test_the_topic_filter_returns_only_the_list_partial_to_htmx(client):
    Topic.objects.create(slug="kv-cache", title="KV cache", order=1)
    Topic.objects.create(slug="batching", title="Continuous batching", order=2)
    response = client.get("/?q=batch", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="topic-list">')
    assert "Continuous batching" in html and "KV cache" not in html
    assert "<html" not in html


def test_the_filter_explains_when_nothing_matches(client):
    Topic.objects.create(slug="kv-cache", title="KV cache", order=1)
    html = client.get("/?q=zzz", headers={"HX-Request": "true"}).content.decode()
    assert "No topic matches" in html


def test_signup_logs_the_new_user_in(client):
    response = client.post(
        reverse("signup"),
        {"username": "ada", "password1": "prefill-decode-42", "password2": "prefill-decode-42"},
    )
    assert response.status_code == 302
    assert get_user_model().objects.filter(username="ada").exists()
    assert "Signed in as" in client.get("/").content.decode()


def test_signup_explains_a_weak_password(client):
    response = client.post(
        reverse("signup"), {"username": "bob", "password1": "123", "password2": "123"}
    )
    assert response.status_code == 200
    assert "too short" in response.content.decode()
    assert not get_user_model().objects.filter(username="bob").exists()


def test_login_and_logout(client):
    get_user_model().objects.create_user("carol", password="tensor-parallel-8")
    response = client.post(reverse("login"), {"username": "carol", "password": "tensor-parallel-8"})
    assert response.status_code == 302
    assert "carol" in client.get("/").content.decode()
    client.post(reverse("logout"))
    assert "Log in" in client.get("/").content.decode()


def test_wrong_password_is_refused_with_a_message(client):
    get_user_model().objects.create_user("dave", password="tensor-parallel-8")
    response = client.post(reverse("login"), {"username": "dave", "password": "nope"})
    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()


def test_vendored_assets_are_served_locally(client):
    html = client.get("/").content.decode()
    for asset in ("vendor/htmx.min.js", "vendor/htmx-ext-sse.min.js"):
        assert f"/static/{asset}" in html
    assert "cdn" not in html.lower() and "https://" not in html


def test_demo_users_are_created_idempotently():
    from trainer.demo import DEMO_AUTHOR, DEMO_LEARNER, demo_users_ensure

    demo_users_ensure()
    demo_users_ensure()
    users = get_user_model().objects
    assert users.filter(username=DEMO_LEARNER.username, is_staff=False).count() == 1
    author = users.get(username=DEMO_AUTHOR.username)
    assert author.is_staff and not author.is_superuser
    assert author.has_perm("questions.change_question")
    assert author.check_password(DEMO_AUTHOR.password)
