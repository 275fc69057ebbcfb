"""Fixtures shared by the lab tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny models are overhead-bound: extra threads only contend on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


LEARNER_PASSWORD = "measure-then-believe"


@pytest.fixture
def learner(settings, redis_url, live_worker):
    """A learner for the lab's browser tests, with the real Redis and Celery worker a run
    needs (a test module may define its own `learner` instead)."""
    from django.contrib.auth import get_user_model

    settings.REDIS_URL = redis_url
    return get_user_model().objects.create_user("ada", password=LEARNER_PASSWORD)


@pytest.fixture
def log_in():
    """log_in(page, base): sign the `learner` in through the login form."""

    def sign_in(page, base: str) -> None:
        page.goto(f"{base}/accounts/login/")
        page.get_by_label("Username").fill("ada")
        page.get_by_label("Password").fill(LEARNER_PASSWORD)
        page.get_by_role("button", name="Log in").click()

    return sign_in
