"""The progress and mock-history charts in a real Chromium: tick labels are not clipped, and
a chart with nothing to draw is an empty state that says what to do."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Page, expect

from questions.models import Loop, Question
from trainer import services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "charts-not-clipped"


@pytest.fixture
def ada():
    call_command("load_bank", verbosity=0)
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as")).to_be_attached()


def test_empty_charts_say_what_to_do(live_server, ada, page: Page, orm):
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/progress/")
    expect(page.get_by_text("Nothing graded yet.")).to_be_visible()
    assert page.locator("#chart-history").count() == 0
    loop = orm(lambda: Loop.objects.order_by("pk").first())
    page.goto(f"{live_server.url}/mock/loops/{loop.slug}/")
    expect(page.get_by_text("No finished mock of this loop yet.")).to_be_visible()
    assert page.locator("#chart-mock-history").count() == 0


def test_competency_labels_fit_inside_the_chart(live_server, ada, page: Page, orm):
    def answer_some():
        for question in Question.objects.filter(kind=Question.Kind.SCENARIO).order_by("pk")[:4]:
            attempt = services.attempt_start(user=ada, question=question)
            services.attempt_submit(attempt=attempt, answer=question.model_answer)

    orm(answer_some)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/progress/")
    chart = page.locator("#chart-competencies")
    expect(chart.locator(".main-svg").first).to_be_attached()
    box = chart.bounding_box()
    labels = chart.locator(".ytick text")
    expect(labels.first).to_be_attached()
    assert labels.count() >= 1
    for i in range(labels.count()):
        label = labels.nth(i).bounding_box()
        assert label["x"] >= box["x"] - 0.5, (labels.nth(i).text_content(), label, box)
