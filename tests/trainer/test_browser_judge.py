"""In Chromium, with the real grader, a real Celery worker and a fake OpenAI-compatible judge
on 127.0.0.1: the offline verdicts render first, the judge runs on the worker, and the page
updates by itself when it answers (or says the offline verdicts stand when it fails)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from tests.trainer import checkfixtures as fx
from tests.trainer.fake_judge import FakeJudge

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery_integration,
    pytest.mark.django_db(transaction=True),
]
PASSWORD = "prefill-then-decode"


@pytest.fixture
def judge_endpoint(settings):
    fake = FakeJudge()
    settings.RUBRIC_JUDGE_URL, settings.RUBRIC_JUDGE_MODEL = fake.url, "judge-model"
    settings.RUBRIC_JUDGE_RETRIES = 0
    yield fake
    fake.close()


@pytest.fixture
def learner():
    fx.make_question()
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def answer_and_skip_checks(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{live_server.url}/practice/{fx.SLUG}/")
    page.get_by_label("Your answer").fill(fx.ANSWER)
    page.get_by_role("button", name="Submit for grading").click()
    page.get_by_role("button", name="Skip checks").click()


def test_the_judge_answers_and_the_page_updates(
    live_server, live_worker, judge_endpoint, learner, page
):
    judge_endpoint.mode = "covered"
    judge_endpoint.delay_s = 4  # the offline verdicts show first, the judge answers later
    answer_and_skip_checks(page, live_server)
    status = page.locator(".judge-status")
    expect(status).to_contain_text("Asking a second opinion")
    expect(status).to_contain_text("Second opinion: judge-model answered on", timeout=20_000)
    judged = page.locator("table.feedback-points .decided-by", has_text="by the judge model")
    expect(judged.first).to_be_visible()
    assert judge_endpoint.requests  # the worker really asked the endpoint


def test_a_failing_judge_leaves_the_offline_verdicts_and_says_so(
    live_server, live_worker, judge_endpoint, learner, page
):
    judge_endpoint.mode = "error"
    answer_and_skip_checks(page, live_server)
    expect(page.locator(".judge-status")).to_contain_text("could not be reached", timeout=20_000)
    expect(page.locator("table.feedback-points .decided-by", has_text="judge")).to_have_count(0)
