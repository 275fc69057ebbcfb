"""In Chromium: a KV-cache problem, step 1 in another spelling of 320 KiB, then a wrong
step 1 with a consistent step 2 earning follow-through credit."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Page, expect
from test_practice_arithmetic import SLUG, llama70_seed

from questions.models import Question
from trainer import services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill("kv-heads-not-heads")
    page.get_by_role("button", name="Log in").click()


def test_kv_cache_problem_with_follow_through(live_server, orm, page: Page):
    orm(call_command, "load_bank", verbosity=0)
    user = orm(get_user_model().objects.create_user, "ada", password="kv-heads-not-heads")
    question = orm(Question.objects.get, slug=SLUG)
    seed = orm(llama70_seed, question)
    first = orm(services.attempt_start, user=user, question=question, seed=seed)
    log_in(page, live_server)

    page.goto(f"{live_server.url}/attempts/{first.pk}/")
    step1 = page.locator("#step-kv_kib_per_token")
    expect(step1.locator(".unit")).to_contain_text("in KiB · within 1%")
    step1.get_by_label("Your answer").fill("0.3125 MiB")
    step1.get_by_label("Your answer").press("Enter")  # Enter submits; htmx swaps the step
    expect(page.locator("#step-kv_kib_per_token .verdict")).to_contain_text("Correct")
    expect(page.locator("#step-kv_kib_per_token .verdict")).to_contain_text("read as 320 KiB")

    second = orm(services.attempt_start, user=user, question=question, seed=seed)
    page.goto(f"{live_server.url}/attempts/{second.pk}/")
    context = orm(services.attempt_context, second)
    context_tokens = context.variant.variables["context"].magnitude
    page.locator("#step-kv_kib_per_token input[name=answer]").fill("160 KiB")  # forgot the x2
    page.locator("#step-kv_kib_per_token input[name=answer]").press("Enter")
    expect(page.locator("#step-kv_kib_per_token .verdict")).to_contain_text("Misconception")
    consistent_gib = 160 * context_tokens / 1024**2  # step 2 from the learner's own step 1
    step2 = page.locator("#step-kv_gib_per_sequence")
    step2.locator("input[name=answer]").fill(f"{consistent_gib} GiB")
    step2.locator("input[name=answer]").press("Enter")
    verdict = page.locator("#step-kv_gib_per_sequence .verdict")
    expect(verdict).to_contain_text("Correct given your earlier answer")
    expect(verdict).to_contain_text("Correct given your answer to step 1:")
    expect(verdict).to_contain_text("credit 100%")
