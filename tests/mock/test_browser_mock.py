"""In Chromium: a whole warm-up loop (start, answer, follow-up, a question that times out,
arithmetic, scorecard, print view); resume after a reload with the server's remaining
time; the peer-interviewer seat (live answer over SSE, marks on the scorecard, a third
user refused, the candidate kept out of the interviewer view)."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

from mock import services
from mock.models import MockInterview, MockItem

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "prefill-then-decode"
WARM_UP = "inference-warm-up"
ANSWER = (
    "Prefill processes the whole prompt in one parallel pass; it is compute-bound and sets the "
    "time to first token, which grows with prompt length. Decode then generates one token per "
    "step, reading all the weights and the KV cache each step, so it is memory-bandwidth-bound "
    "and sets the time per output token. The KV cache keeps each layer's keys and values so a "
    "step does not recompute the prefix."
)


@pytest.fixture
def users():
    call_command("load_bank", verbosity=0)
    for name in ("ada", "bob", "cy"):
        get_user_model().objects.create_user(name, password=PASSWORD)


def log_in(page: Page, base: str, name: str = "ada") -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text(f"Signed in as {name}")).to_be_visible()


def start_warm_up(page: Page, base: str, orm) -> MockInterview:
    page.goto(f"{base}/")
    page.get_by_role("link", name="Mock interview").click()
    page.get_by_role("link", name="Inference warm-up").click()
    expect(page.locator("table.mock-rounds tbody tr")).to_have_count(4)
    page.get_by_role("button", name="Start the loop").click()
    expect(page.locator("#question-clock")).to_be_visible()
    return orm(MockInterview.objects.get, user__username="ada", finished__isnull=True)


def test_a_whole_warm_up_loop_to_the_scorecard(live_server, users, settings, orm, page: Page):
    settings.MOCK_TIME_SCALE = 0.05  # 10 min → 30 s
    base = live_server.url
    log_in(page, base)
    mock = start_warm_up(page, base, orm)
    # The second question will run out of time: give it 6 s before it starts.
    orm(lambda: MockItem.objects.filter(mock=mock, order=1).update(budget_s=6))

    # 1: answer, then the first follow-up probe appears; answer it; move on.
    expect(page.locator("#question-number")).to_have_text("1")
    page.get_by_label("Your answer").fill(ANSWER)
    page.get_by_role("button", name="Submit answer").click()
    expect(page.get_by_text("Follow-up 1 of 4:")).to_be_visible()
    page.locator("#follow-up-answer").fill(
        "At 32K tokens prefill grows: the matmuls stay linear but attention is quadratic."
    )
    page.get_by_role("button", name="Answer follow-up").click()
    expect(page.get_by_text("Follow-up 2 of 4:")).to_be_visible()
    page.get_by_role("button", name="Next question").click()

    # 2: type, stop, and let the clock run out: nothing moves at 0:00; a "late" banner
    # shows, the box stays editable, and what is typed after the bell is kept (late).
    expect(page.locator("#question-number")).to_have_text("2")
    page.get_by_label("Your answer").press_sequentially("Turn on streaming first", delay=20)
    expect(page.locator("#late-banner")).to_be_visible(timeout=20_000)
    expect(page.locator("#question-clock")).to_have_text("0:00")
    page.wait_for_timeout(1500)  # past the deadline's grace: still the same question
    expect(page.locator("#question-number")).to_have_text("2")
    with page.expect_response(lambda r: r.url.endswith("/draft/") and r.ok):  # autosaved
        page.get_by_label("Your answer").press_sequentially(", then cap the batch", delay=20)
    page.reload()  # a reload past the deadline stays too, banner and draft included
    expect(page.locator("#late-banner")).to_be_visible()
    expect(page.get_by_label("Your answer")).to_have_value(
        "Turn on streaming first, then cap the batch"
    )
    page.get_by_role("button", name="Next question").click()
    expect(page.locator("#question-number")).to_have_text("3")
    timed_out = orm(
        lambda: MockItem.objects.select_related("attempt", "question").get(mock=mock, order=1)
    )
    assert timed_out.closed is not None and timed_out.late is True
    assert timed_out.attempt.answer == "Turn on streaming first, then cap the batch"

    # 3: answer and move on.
    page.get_by_label("Your answer").fill(ANSWER)
    page.get_by_role("button", name="Submit answer").click()
    expect(page.get_by_text("Follow-up 1 of 4:")).to_be_visible()
    page.get_by_role("button", name="Next question").click()

    # 4: arithmetic with fresh numbers; no verdict until the end.
    expect(page.locator("#question-number")).to_have_text("4")
    page.locator("input[name='step:prefill_tflop']").fill("16 TFLOP")
    page.get_by_role("button", name="Submit answers").click()
    expect(page.get_by_text("(checked at the end)")).to_be_visible()
    page.get_by_role("button", name="Finish the loop").click()

    # The scorecard (graded by the real rubric model).
    expect(page.locator("#verdict h2")).to_contain_text("Verdict:", timeout=90_000)
    expect(page.locator("#overall-auto")).to_contain_text("/10")
    expect(page.locator("#time-used")).to_be_visible()
    expect(page.locator("tr.competency")).to_have_count(6)
    expect(page.locator("#weakest li")).to_have_count(3)
    expect(page.locator("#weakest a[href^='/practice/']").first).to_be_visible()
    expect(page.locator("table.rubric").first).to_be_visible()
    expect(page.locator("table.steps-result")).to_contain_text("prefill_tflop")
    late_answer = page.locator(".answer-text", has_text="Turn on streaming first, then cap")
    expect(late_answer).to_be_visible()
    expect(page.locator("tr", has_text=timed_out.question.title).locator(".flag")).to_have_text(
        "late"
    )
    expect(page.locator("details.model").first).to_be_visible()
    page.emulate_media(media="print")
    expect(page.locator(".site-header")).to_be_hidden()
    expect(page.locator("#verdict")).to_be_visible()
    page.emulate_media(media="screen")

    page.goto(f"{base}/mock/loops/{WARM_UP}/")
    expect(page.locator("#chart-mock-history .main-svg").first).to_be_attached()  # plotly drew


def test_a_reload_resumes_the_same_question_with_the_remaining_time(
    live_server, users, settings, orm, page: Page
):
    settings.MOCK_TIME_SCALE = 1.0
    base = live_server.url
    log_in(page, base)
    mock = start_warm_up(page, base, orm)
    page.get_by_label("Your answer").press_sequentially("The request is tokenised", delay=20)
    page.wait_for_timeout(3000)
    page.reload()
    expect(page.locator("#question-number")).to_have_text("1")
    expect(page.get_by_label("Your answer")).to_have_value("The request is tokenised")
    shown = page.evaluate("window.mockClock.questionLeft()")
    item = orm(MockItem.objects.get, mock=mock, order=0)
    expected = services.remaining_s(item.deadline)
    error = abs(shown - expected)
    print(f"resume: page shows {shown:.2f} s left, server {expected:.2f} s, error {error:.2f} s")
    assert error <= 2.0
    assert expected < item.budget_s - 3  # the clock kept running across the reload


def test_the_interviewer_seat(asgi_server, users, fast_grader, orm, browser: Browser):
    candidate_ctx, interviewer_ctx, third_ctx = (browser.new_context() for _ in range(3))
    candidate, interviewer, third = (
        c.new_page() for c in (candidate_ctx, interviewer_ctx, third_ctx)
    )
    for p, name in ((candidate, "ada"), (interviewer, "bob"), (third, "cy")):
        log_in(p, asgi_server, name)
    mock = start_warm_up(candidate, asgi_server, orm)
    candidate.get_by_text("Peer interviewer").click()
    candidate.get_by_role("button", name="Create an invite link").click()
    candidate.get_by_text("Peer interviewer").click()
    link = candidate.locator("#invite-url").input_value()
    assert "/mock/join/" in link

    interviewer.goto(link)  # opening the link takes nothing: the button does
    interviewer.get_by_role("button", name="Take the interviewer seat").click()
    expect(interviewer.get_by_role("heading", name="Interviewer seat")).to_be_visible()
    expect(interviewer.locator("#live-status")).to_contain_text("Live")
    expect(interviewer.locator("#item-0 .model-answer")).to_be_attached()
    expect(interviewer.locator("#item-0 input[name=point]").first).to_be_visible()

    third.goto(link)
    expect(third.get_by_text("already been used")).to_be_visible()
    assert third.goto(f"{asgi_server}/mock/{mock.pk}/interviewer/").status == 404
    response = candidate.request.get(f"{asgi_server}/mock/{mock.pk}/interviewer/")
    assert response.status == 404

    candidate.reload()  # the page now names the interviewer
    started = time.monotonic()
    candidate.get_by_label("Your answer").press_sequentially("Prefill reads the prompt", delay=15)
    live = interviewer.locator('.live-answer[data-item="0"][data-slot="main"]')
    expect(live).to_have_text("Prefill reads the prompt", timeout=10_000)
    print(f"interviewer saw the typed answer {time.monotonic() - started:.2f} s after typing began")

    interviewer.locator("#item-0 input[name=point]").first.check()
    interviewer.locator("#item-0 textarea[name=notes]").fill("Good start, no numbers yet.")
    expect(interviewer.locator("#item-0 .mark-status")).to_contain_text(
        "your score", timeout=10_000
    )
    interviewer.locator("#item-0 textarea[name=notes]").blur()
    page_done = lambda: orm(MockItem.objects.get, mock=mock, order=0).interviewer_notes  # noqa: E731
    deadline = time.monotonic() + 10
    while page_done() != "Good start, no numbers yet." and time.monotonic() < deadline:
        time.sleep(0.2)

    candidate.get_by_role("button", name="Submit answer").click()
    candidate.on("dialog", lambda dialog: dialog.accept())
    candidate.get_by_role("button", name="End the loop now").click()
    expect(candidate.locator("#overall-interviewer")).to_contain_text("/10", timeout=60_000)
    expect(candidate.get_by_text("Good start, no numbers yet.")).to_be_visible()
    expect(candidate.locator("td.interviewer-mark").first).to_have_text("✓")
    expect(interviewer.locator("#mock-ended")).to_be_visible(timeout=10_000)
    for c in (candidate_ctx, interviewer_ctx, third_ctx):
        c.close()
