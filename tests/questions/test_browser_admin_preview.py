"""In Chromium: an author edits a prompt and the htmx preview follows, with a solved variant."""

from __future__ import annotations

import pytest
from bankfiles import write_topic
from playwright.sync_api import Page, expect

from questions.bank import read_bank
from questions.models import Question
from questions.services import bank_load
from trainer.demo import DEMO_AUTHOR, demo_users_ensure

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def question(tmp_path):
    bank_load(read_bank([write_topic(tmp_path)]))
    demo_users_ensure()
    return Question.objects.get(slug="kv-70b")


def test_the_live_preview_follows_the_prompt_as_typed(live_server, question, page: Page):
    page.goto(
        f"{live_server.url}/admin/login/?next=/admin/questions/question/{question.pk}/change/"
    )
    page.fill("#id_username", DEMO_AUTHOR.username)
    page.fill("#id_password", DEMO_AUTHOR.password)
    page.click("input[type=submit]")

    preview = page.locator("#preview")
    expect(preview).to_contain_text("Reference answer:")
    expect(preview.locator(".preview-steps > li")).to_have_count(2)
    page.fill("#id_prompt", "Size the cache for **this variant**. <script>window.pwned=1</script>")
    expect(preview.locator("strong", has_text="this variant")).to_be_visible()
    assert page.evaluate("window.pwned === undefined")
    first = preview.locator("h3").inner_text()
    for _ in range(5):  # a new variant is drawn on request (seeds differ each time)
        page.click("#preview-redraw")
        page.wait_for_timeout(300)
        if preview.locator("h3").inner_text() != first:
            break
    assert preview.locator("h3").inner_text() != first
