"""Mock-interview pages: choose a loop, the timed question page (no hints, no model answer,
no lab links), autosave, privacy, the scorecard's sections, history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.utils import timezone

from mock import services
from mock.models import MockInterview, MockItem
from questions.models import Loop, Question

PASSWORD = "prefill-then-decode"
WARM_UP = "inference-warm-up"

pytestmark = pytest.mark.django_db


@pytest.fixture
def signed_in(client, ada):
    client.login(username="ada", password=PASSWORD)
    return client


def start(client) -> MockInterview:
    response = client.post(f"/mock/loops/{WARM_UP}/start/")
    assert response.status_code == 302
    return MockInterview.objects.get(pk=int(response["Location"].strip("/").split("/")[-1]))


def test_the_nav_links_to_mock_interviews_and_lists_the_loops(signed_in):
    assert 'href="/mock/">Mock interview</a>' in signed_in.get("/").content.decode()
    page = signed_in.get("/mock/").content.decode()
    assert "Inference warm-up" in page and "38 min" in page


def test_the_loop_page_shows_rounds_and_total_time(signed_in, settings):
    settings.MOCK_TIME_SCALE = 1.0
    page = signed_in.get(f"/mock/loops/{WARM_UP}/").content.decode()
    assert page.count("<tr><td>") >= 4
    assert 'id="loop-total">38:00' in page
    assert "Start the loop" in page


def test_the_question_page_has_clocks_from_the_server_and_nothing_that_helps(signed_in):
    mock = start(signed_in)
    item = mock.items.get(order=0)
    page = signed_in.get(f"/mock/{mock.pk}/").content.decode()
    left = float(re.search(r'id="question-clock" data-remaining-s="([\d.]+)"', page).group(1))
    assert abs(left - services.remaining_s(item.deadline)) < 2
    assert 'id="loop-clock"' in page
    question = item.question
    assert question.model_answer_html[:60] not in page
    assert "Model answer" not in page and "Hint" not in page
    assert "Measure it in the lab" not in page and 'href="/lab/' not in page
    assert question.follow_up_prompts()[0] not in page  # probes come after the first answer


def test_autosave_keeps_the_draft_and_a_reload_restores_it(signed_in):
    mock = start(signed_in)
    response = signed_in.post(
        f"/mock/{mock.pk}/items/0/draft/", {"slot": "main", "answer": "Prefill is one pass"}
    )
    assert "Saved" in response.content.decode()
    assert "Prefill is one pass</textarea>" in signed_in.get(f"/mock/{mock.pk}/").content.decode()


def test_someone_elses_mock_is_a_404(client, ada, bob):
    mock = services.mock_start(user=ada, loop=Loop.objects.get(slug=WARM_UP))
    client.login(username="bob", password=PASSWORD)
    assert client.get(f"/mock/{mock.pk}/").status_code == 404
    assert client.post(f"/mock/{mock.pk}/items/0/draft/", {"answer": "x"}).status_code == 404
    assert client.get(f"/mock/{mock.pk}/scorecard/").status_code == 404


def test_a_full_loop_yields_a_scorecard_with_every_section(signed_in, fast_grader):
    mock = start(signed_in)
    for order in range(3):
        signed_in.get(f"/mock/{mock.pk}/")  # the page starts the question's clock
        item = mock.items.get(order=order)
        signed_in.post(
            f"/mock/{mock.pk}/items/{order}/answer/", {"answer": item.question.model_answer}
        )
        page = signed_in.get(f"/mock/{mock.pk}/").content.decode()
        assert "Follow-up 1 of" in page and item.question.follow_up_prompts()[0] in page
        signed_in.post(f"/mock/{mock.pk}/items/{order}/follow-ups/0/", {"answer": "It grows."})
        signed_in.post(f"/mock/{mock.pk}/items/{order}/next/")
    page = signed_in.get(f"/mock/{mock.pk}/").content.decode()
    item = mock.items.get(order=3)
    assert item.question.kind == Question.Kind.ARITHMETIC
    assert "Submit answers" in page
    response = signed_in.post(f"/mock/{mock.pk}/items/3/next/", {"step:prefill_tflop": "16 TFLOP"})
    assert response["Location"] == f"/mock/{mock.pk}/"
    assert signed_in.get(f"/mock/{mock.pk}/")["Location"] == f"/mock/{mock.pk}/scorecard/"
    page = signed_in.get(f"/mock/{mock.pk}/scorecard/").content.decode()
    for section in ('id="verdict"', 'id="time"', 'id="competencies"', 'id="weakest"'):
        assert section in page
    assert "senior inference round" in page and "overall ≥ 7.0" in page
    for name in ("latency", "memory", "throughput", "cost", "reliability", "safety"):
        assert f'data-competency="{name}"' in page
    assert "Not yet:" in page and "Strong:" in page  # the bands are explained
    # the rubric, each point's verdict in words, with the sentence and why
    assert 'class="verdict-label">Verified hit</strong>' in page and "Your sentence and why" in page
    assert "Verdict" in page and "prefill_tflop" in page  # arithmetic result
    assert "Model answer" in page and "Measure it in the lab" in page  # revealed at the end
    assert page.count('href="/practice/') >= 3 and 'href="/lab/' in page
    assert "@media print" in Path("static/css/site.css").read_text()
    mock.refresh_from_db()
    assert mock.status == "finished" and mock.overall is not None


def test_history_lists_past_mocks_with_chart_data(signed_in, fast_grader):
    for _ in range(2):
        mock = start(signed_in)
        signed_in.post(f"/mock/{mock.pk}/finish/")
    page = signed_in.get(f"/mock/loops/{WARM_UP}/").content.decode()
    assert 'id="mock-history-data"' in page and 'id="chart-mock-history"' in page
    assert page.count(">scorecard</a>") == 2
    assert MockItem.objects.filter(mock__user__username="ada", closed__isnull=True).count() == 0
    assert timezone.now()
