"""In a real headless Chromium: sign up, log out, log in, see the home page, filter with htmx."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from questions.models import Topic

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def topics():
    Topic.objects.create(slug="kv-cache", title="KV cache", summary="Bytes per token", order=1)
    Topic.objects.create(slug="speculative", title="Speculative decoding", order=2)


def test_sign_up_log_in_and_filter_topics(live_server, topics, page: Page):
    page.goto(f"{live_server.url}/accounts/signup/")
    page.get_by_label("Username").fill("grace")
    page.get_by_label("Password", exact=True).fill("paged-attention-16")
    page.get_by_label("Password again").fill("paged-attention-16")
    page.get_by_role("button", name="Sign up").click()
    expect(page.get_by_text("Signed in as")).to_contain_text("grace")

    page.get_by_role("button", name="Log out").click()
    page.get_by_role("link", name="Log in").click()
    page.get_by_label("Username").fill("grace")
    page.get_by_label("Password").fill("paged-attention-16")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as")).to_contain_text("grace")

    topics = page.locator("#topic-list li")
    expect(topics).to_have_count(2)
    page.evaluate("window.__notReloaded = true")  # survives only if no full navigation happens
    with page.expect_response(re.compile(r"/\?q=spec")) as swap:
        page.get_by_label("Filter topics").fill("spec")
    assert swap.value.request.headers.get("hx-request") == "true"
    expect(topics).to_have_count(1)
    expect(topics.first).to_contain_text("Speculative decoding")
    assert page.evaluate("window.__notReloaded") is True
    expect(page).to_have_url(re.compile(r"\?q=spec$"))
