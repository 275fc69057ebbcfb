"""In Chromium: after the main answer, a follow-up with a rubric has its own answer box,
autosaved as typed (a reload finds the text) and graded with the same feedback."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.trainer import checkfixtures as fx
from tests.trainer.test_browser_checks import learner, submit_wrong_number_answer  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
TEXT = "With an FP8 KV cache each token takes half the bytes: about 160 KiB instead of 320 KiB."


def test_a_follow_up_is_autosaved_and_graded(live_server, learner, page: Page):  # noqa: F811
    submit_wrong_number_answer(page, live_server)
    page.get_by_role("button", name="Skip checks").click()
    box = page.get_by_label("Your answer to follow-up 1")
    box.press_sequentially(TEXT[:40], delay=5)
    expect(page.locator("#autosave-status")).to_contain_text("Draft saved")
    page.reload()
    expect(page.get_by_label("Your answer to follow-up 1")).to_have_value(TEXT[:40])
    page.get_by_label("Your answer to follow-up 1").fill(TEXT)
    page.get_by_role("button", name="Grade follow-up 1").click()
    follow_up = page.locator("#follow-up-1")
    expect(follow_up.locator(".total")).to_contain_text("Follow-up score:")
    expect(follow_up.locator("table.feedback-points .verdict-label")).to_have_count(1)
    expect(follow_up).to_contain_text("Halves the KV bytes per token")
    expect(page.get_by_text(fx.ANSWER[:30]).first).to_be_visible()
