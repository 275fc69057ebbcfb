"""A question's sources reach the learner (scenario and arithmetic pages once graded) and the
author (admin preview), escaped; the admin checks typed-in sources like the bank does."""

from __future__ import annotations

import pytest
from bankfiles import topic_data, write_topic
from django.contrib.auth import get_user_model
from django.template.loader import render_to_string
from django.utils import timezone

from questions.bank import read_bank
from questions.models import Question
from questions.services import bank_load
from trainer.demo import DEMO_AUTHOR, demo_users_ensure
from trainer.models import Attempt

pytestmark = pytest.mark.django_db

SOURCE = {
    "ref": "vLLM paper (Kwon et al., SOSP 2023), §7.1",
    "url": "https://arxiv.org/abs/2309.06180",
    "quote": "20-26% higher attention kernel latency <b>(paraphrase)</b>",
    "checked": "2026-12-01",
}


@pytest.fixture
def loaded(tmp_path):
    data = topic_data()
    for question in data["questions"]:
        question["sources"] = [SOURCE, {k: v for k, v in SOURCE.items() if k != "url"}]
    bank = read_bank([write_topic(tmp_path, data)])
    assert not bank.errors, bank.errors
    bank_load(bank)


def test_the_sources_list_links_quotes_and_escapes():
    html = render_to_string("questions/_sources.html", {"sources": [SOURCE]})
    assert "<h3>Sources</h3>" in html
    assert '<a href="https://arxiv.org/abs/2309.06180"' in html
    assert "&lt;b&gt;(paraphrase)&lt;/b&gt;" in html and "<b>" not in html
    assert "(checked 2026-12-01)" in html
    assert render_to_string("questions/_sources.html", {"sources": []}).strip() == ""


def test_a_graded_scenario_shows_its_sources_under_the_model_answer(loaded):
    question = Question.objects.get(slug="kv-why")
    user = get_user_model().objects.create_user("ada")
    attempt = Attempt.objects.create(
        user=user, question=question, answer="GQA", submitted=timezone.now(), score=1
    )
    html = render_to_string(
        "trainer/scenario.html", {"question": question, "attempt": attempt, "rows": []}
    )
    assert html.index("Model answer") < html.index("<h3>Sources</h3>")
    assert html.count("vLLM paper (Kwon et al., SOSP 2023), §7.1") == 2


def test_a_finished_arithmetic_attempt_shows_the_model_answer_and_sources(loaded):
    question = Question.objects.get(slug="kv-70b")
    question.model_answer = "320 KiB per token for **Llama-3-70B**."
    question.save()
    context = {"question": question, "attempt": {"submitted": True, "score": 1}, "steps": []}
    html = render_to_string("trainer/_summary.html", context)
    assert "<strong>Llama-3-70B</strong>" in html and "<h3>Sources</h3>" in html
    context["attempt"] = {"submitted": None}
    assert "Sources" not in render_to_string("trainer/_summary.html", context)


def test_the_admin_preview_shows_the_sources(client, loaded):
    demo_users_ensure()
    assert client.login(username=DEMO_AUTHOR.username, password=DEMO_AUTHOR.password)
    question = Question.objects.get(slug="kv-why")
    html = client.post("/admin/questions/question/preview/", {"object_id": question.pk})
    assert "<h3>Sources</h3>" in html.content.decode()


def test_the_admin_form_refuses_a_source_that_is_not_a_web_address(loaded):
    from questions.admin import QuestionForm

    question = Question.objects.get(slug="kv-why")
    bad = [{**SOURCE, "url": "javascript:alert(1)"}]
    form = QuestionForm(data={"sources": bad}, instance=question)
    form.full_clean()
    (message,) = form.errors["sources"]
    assert message.startswith("sources[0] > url: 'javascript:alert(1)' is not a web address")
