"""In a real headless Chromium: from the profile page, add an email and change the password;
then forget it, reset it through the emailed link, and find the link spent afterwards.

Playwright's sync API keeps an event loop running in the test thread (from its session
fixture on), so the one ORM call (creating the user) runs in a worker thread; the email is
read from the locmem outbox, not the database.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connections
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FIRST, SECOND, THIRD = "prefill-then-decode-1", "kv-cache-is-memory-2", "paged-blocks-of-16-3"


def in_a_thread(fn):
    """Run ORM code off the test thread (Playwright's loop runs there), then close that
    thread's database connections."""

    def run():
        try:
            return fn()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def test_profile_email_password_change_and_reset_by_email(live_server, redis_url, page: Page):
    in_a_thread(lambda: get_user_model().objects.create_user("ada", password=FIRST))
    csp_errors: list[str] = []
    page.on(
        "console",
        lambda m: csp_errors.append(m.text) if "Content Security Policy" in m.text else None,
    )

    def log_in(password: str) -> None:
        page.goto(f"{live_server.url}/accounts/login/")
        page.get_by_label("Username").fill("ada")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Log in").click()

    log_in(FIRST)
    page.get_by_role("link", name="Account").click()
    expect(page.locator("#account-username")).to_have_text("ada")
    expect(page.locator("#account-email")).to_have_text("none")
    page.get_by_label("Email address").fill("ada@example.com")
    page.get_by_label("Current password").fill(FIRST)
    page.get_by_role("button", name="Save email").click()
    expect(page.get_by_text("Saved: reset links now go to ada@example.com.")).to_be_visible()
    expect(page.locator("#account-email")).to_have_text("ada@example.com")

    page.get_by_role("link", name="Change your password").click()
    page.get_by_label("Current password").fill(FIRST)
    page.get_by_label("New password", exact=True).fill(SECOND)
    page.get_by_label("New password again").fill(SECOND)
    page.get_by_role("button", name="Change password").click()
    expect(page.get_by_text("Your password was changed.")).to_be_visible()
    expect(page).to_have_url(f"{live_server.url}/accounts/profile/")

    page.get_by_role("button", name="Log out").click()
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_role("link", name="Reset it").click()
    page.get_by_label("Email address").fill("ADA@example.com")
    page.get_by_role("button", name="Send the reset link").click()
    expect(page.locator("#reset-sent")).to_contain_text("If an account on this site has that")

    (message,) = mail.outbox  # sent before the redirect to the page above
    assert message.to == ["ada@example.com"]
    link = re.search(r"http://\S+/accounts/reset/\S+/", message.body).group(0)
    page.goto(link)
    page.get_by_label("New password", exact=True).fill(THIRD)
    page.get_by_label("New password again").fill(THIRD)
    page.get_by_role("button", name="Set the password").click()
    expect(page.locator("#reset-complete")).to_be_visible()
    page.get_by_role("link", name="Log in").last.click()
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(THIRD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as ada")).to_be_visible()

    page.goto(link)  # spent: the password it was made for is gone
    expect(page.locator("#invalid-link")).to_contain_text("already")
    log_in(SECOND)  # the password before the reset no longer works
    expect(page.get_by_text("Please enter a correct username and password")).to_be_visible()
    assert csp_errors == []
