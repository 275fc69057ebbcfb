"""In Chromium: an answer typed and left survives closing the tab; the practice loop from
answer to evidence-highlighted feedback to a scheduled review."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SLUG = "kv-arith-llama3-70b-node"
PASSWORD = "prefill-then-decode"


def log_in(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


@pytest.fixture
def learner():
    call_command("load_bank", verbosity=0)
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def test_typed_answer_survives_closing_the_tab(live_server, learner, browser: Browser):
    first = browser.new_context()
    page = first.new_page()
    log_in(page, live_server)
    page.goto(f"{live_server.url}/practice/{SLUG}/")
    text = "Per token: 2 x 80 layers x 8 KV heads x 128 x 2 B = 320 KiB."
    page.get_by_label("Your answer").press_sequentially(text, delay=10)
    page.wait_for_timeout(5000)  # the learner stops typing and closes the tab 5 s later
    first.close()

    other = browser.new_context()  # another browser session, same learner
    page = other.new_page()
    log_in(page, live_server)
    page.goto(f"{live_server.url}/practice/{SLUG}/")
    expect(page.get_by_label("Your answer")).to_have_value(text)
    other.close()


def test_answer_feedback_evidence_and_review(live_server, learner, page: Page):
    log_in(page, live_server)
    page.goto(f"{live_server.url}/topics/kv-cache-arithmetic/")
    page.get_by_role("link", name="How many 8K conversations fit on an 8×H100 node?").click()
    page.get_by_label("Your answer").fill(
        "Per token the cache is 2 x 80 layers x 8 KV heads x 128 x 2 bytes, which is 327,680 B or "
        "320 KiB, because Llama-3-70B uses GQA with 8 KV heads rather than 64. "
        "An 8,192-token session then needs 2.5 GiB, about 2.68 GB. "
        "The BF16 weights are about 141 GB, so after weights and a 10% reserve roughly 435 GB "
        "is left for KV on the 640 GB node, which is about 162 full-length sessions."
    )
    page.get_by_role("button", name="Submit for grading").click()
    # Points the answer touched without settling come back as quick checks first.
    expect(page.get_by_role("heading", name=re.compile("Score:|Quick checks"))).to_be_visible()
    if page.get_by_role("button", name="Skip checks").count():
        page.get_by_role("button", name="Skip checks").click()
    expect(page.get_by_role("heading", name="Score:")).to_be_visible()
    expect(page.locator("mark.evidence").first).to_be_visible()
    expect(page.locator("table.rubric tr.hit").first).to_be_visible()
    expect(page.get_by_text("Next review:")).to_be_visible()
    expect(page.get_by_text("Model answer")).to_be_visible()
    page.get_by_role("button", name="Save my assessment").click()
    expect(page.locator("#self-assessment .scores")).to_contain_text("Grader:")
    page.goto(f"{live_server.url}/progress/")
    expect(page.locator("#chart-history .main-svg").first).to_be_attached()  # plotly drew
