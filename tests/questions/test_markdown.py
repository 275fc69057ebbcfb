"""Authored Markdown is sanitised: no script, no event handlers, no javascript: links."""

from __future__ import annotations

import pytest

from questions.markdown import render_markdown
from questions.models import Question, Topic

PAYLOADS = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(1)">',
    "[click](javascript:alert(1))",
    '<a href="javascript:alert(1)">x</a>',
    "<svg/onload=alert(1)>",
    '<iframe src="https://evil.example"></iframe>',
    '<div style="background:url(javascript:alert(1))">x</div>',
    "<scr<script>ipt>alert(1)</script>",
    '<details open ontoggle="alert(1)">',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_are_neutralised(payload):
    html = render_markdown(f"Intro\n\n{payload}\n\n**after**").lower()
    for bad in (
        "<script",
        "onerror",
        "onload",
        "ontoggle",
        "javascript:",
        "<iframe",
        "<svg",
        "style=",
    ):
        assert bad not in html
    assert "<p>intro</p>" in html  # the surrounding text survives


def test_formatting_survives():
    html = render_markdown(
        "## KV\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n`code` and [vLLM](https://vllm.ai)"
    )
    assert "<h2>KV</h2>" in html and "<table>" in html and "<code>code</code>" in html
    assert 'href="https://vllm.ai"' in html and 'rel="noopener noreferrer nofollow"' in html


@pytest.mark.django_db
def test_saved_questions_cache_sanitised_html(client):
    topic = Topic.objects.create(slug="t", title="T", order=1)
    Question.objects.create(
        topic=topic,
        slug="q",
        kind="scenario",
        title="Q",
        status="published",
        prompt="Hello <script>alert(1)</script>",
        model_answer="<img src=x onerror=alert(1)>",
    )
    q = Question.objects.get(slug="q")
    assert "<script" not in q.prompt_html and "onerror" not in q.model_answer_html
    assert "Hello" in q.prompt_html
