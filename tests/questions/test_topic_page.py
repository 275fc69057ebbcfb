"""Learners see only published questions; a topic page lists kind and difficulty."""

from __future__ import annotations

import pytest

from questions.models import Question, Topic

pytestmark = pytest.mark.django_db


def test_topic_page_lists_published_questions_with_kind_and_difficulty(client):
    topic = Topic.objects.create(slug="kv-cache", title="KV cache", order=1)
    Question.objects.create(
        topic=topic,
        slug="a",
        kind="arithmetic",
        title="Bytes per token",
        prompt="p",
        difficulty=3,
        status="published",
    )
    Question.objects.create(
        topic=topic, slug="b", kind="scenario", title="Secret draft", prompt="p", status="draft"
    )
    html = client.get("/topics/kv-cache/").content.decode()
    assert "Bytes per token" in html and "Arithmetic" in html and "3/3" in html
    assert "Secret draft" not in html


def test_unknown_topic_is_404(client):
    assert client.get("/topics/nope/").status_code == 404
