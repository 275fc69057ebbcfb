"""The web process (uvicorn, a real child process) SIGKILLed and started again on the same
port while Chromium is on a mock interview and on a live lab run. Nothing the learner typed
is lost, the question clock continues from the server's deadline, and the lab chart ends
with every point exactly once while the run streams to completion."""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from playwright.sync_api import Page, expect
from procs import Procs, QueueToOurselves, free_port

from lab import services as lab_services
from lab.labs import get_lab
from mock import services as mock_services
from mock.models import MockInterview, MockItem

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery_integration,
    pytest.mark.django_db(transaction=True),
]
PASSWORD = "restart-the-web-tier"
TYPED = "Prefill is compute-bound: the whole prompt goes through in one parallel pass"
TYPED_DURING_OUTAGE = "; decode is memory-bound"
TYPED_AT_THE_END = ", bound by HBM bandwidth."
RUN_KV = {"tokens": 384, "prompt_tokens": 16, "every": 2, "block_size": 8}  # 768 points
MEASURED_TRACES = """
document.getElementById('lab-chart').data
  .filter((t) => !t.name.includes('predicted'))
  .map((t) => [t.name, t.x, t.y])
"""


@pytest.fixture
def ada():
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def wait_js(page: Page, expression: str, timeout: float) -> None:
    """Poll a JS expression with page.evaluate (the site's CSP forbids the eval that
    page.wait_for_function relies on)."""
    wait_for(lambda: page.evaluate(expression), timeout=timeout, what=expression)


def fresh(run, orm):
    orm(run.refresh_from_db)
    return run


def log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as ada")).to_be_visible()


def draft_of(item: MockItem, orm) -> str:
    return orm(lambda: MockItem.objects.select_related("attempt").get(pk=item.pk).attempt.draft)


@pytest.fixture
def bank():
    call_command("load_bank", verbosity=0)


def test_mock_interview_survives_a_web_restart(redis_url, ada, bank, orm, page: Page):
    port = free_port()
    with Procs(redis_url, MOCK_TIME_SCALE="1.0") as procs:
        web = procs.web(port)
        base = web.info["url"]
        log_in(page, base)
        page.goto(f"{base}/mock/loops/inference-warm-up/")
        page.get_by_role("button", name="Start the loop").click()
        expect(page.locator("#question-number")).to_have_text("1")
        mock = orm(MockInterview.objects.get, user=ada, finished__isnull=True)
        item = orm(MockItem.objects.get, mock=mock, order=0)
        deadline = item.deadline

        page.get_by_label("Your answer").press_sequentially(TYPED, delay=10)
        wait_for(lambda: draft_of(item, orm) == TYPED, what="the autosave")  # stored by web #1

        web.kill()
        # Typed while the web is down: the autosave fails, the page says so and keeps it.
        box = page.get_by_label("Your answer")
        box.press_sequentially(TYPED_DURING_OUTAGE, delay=10)
        expect(page.locator("#autosave-status")).to_contain_text("Not saved yet")
        assert draft_of(item, orm) == TYPED
        web = procs.web(port)  # a new process on the same port
        # No key pressed since: the page sends the draft again by itself once it can.
        wait_for(
            lambda: draft_of(item, orm) == TYPED + TYPED_DURING_OUTAGE, what="the retried save"
        )
        expect(page.locator("#autosave-status")).to_contain_text("Saved")
        page.reload()

        expect(page.locator("#question-number")).to_have_text("1")
        expect(page.get_by_label("Your answer")).to_have_value(TYPED + TYPED_DURING_OUTAGE)
        shown = page.evaluate("window.mockClock.questionLeft()")
        orm(item.refresh_from_db)
        assert item.deadline == deadline  # the restart did not restart the question
        expected = mock_services.remaining_s(item.deadline)
        print(f"after the restart: page shows {shown:.2f} s left, server {expected:.2f} s")
        assert abs(shown - expected) <= 2.0
        elapsed = (item.deadline - item.started).total_seconds() - expected
        assert elapsed > 3 and shown < item.budget_s - 3  # the clock kept running

        # The loop's time runs out while the web is down again: the page stays, with
        # everything typed, and sends it once a server answers (the mock then ends).
        def run_out():
            soon = timezone.now() + timedelta(seconds=7)
            MockItem.objects.filter(pk=item.pk).update(deadline=soon)
            MockInterview.objects.filter(pk=item.mock_id).update(deadline=soon)

        orm(run_out)
        page.reload()
        web.kill()
        box.press("Control+End")  # after the reload the caret is at the start
        box.press_sequentially(TYPED_AT_THE_END, delay=10)
        expect(page.locator("#next-status")).to_contain_text(
            "Time is up, but the server did not answer", timeout=20_000
        )
        expect(page.locator("#question-number")).to_have_text("1")
        expect(box).to_have_value(TYPED + TYPED_DURING_OUTAGE + TYPED_AT_THE_END)
        procs.web(port)
        expect(page).to_have_url(re.compile(r"/scorecard/$"), timeout=30_000)
        item = orm(lambda: MockItem.objects.select_related("attempt").get(pk=item.pk))
        assert item.closed is not None
        assert item.attempt.answer == TYPED + TYPED_DURING_OUTAGE + TYPED_AT_THE_END
        assert item.late  # it reached the server after deadline + grace: kept, marked late


def test_live_lab_chart_survives_a_web_restart(redis_url, ada, orm, page: Page):
    port = free_port()
    # The worker is paused across the outage: no stale-run reaping meanwhile.
    with QueueToOurselves("lab-cpu"), Procs(redis_url, LAB_STALE_SECONDS="600") as procs:
        web = procs.web(port, wait=False)
        worker = procs.worker("lab-w", wait=False)
        procs.wait(worker, web)
        base = web.info["url"]
        log_in(page, base)
        run = orm(lab_services.start_run, ada, "kv-cache-growth", RUN_KV)
        page.goto(f"{base}/lab/runs/{run.pk}/")
        wait_js(page, "window.labRun && window.labRun.drawn >= 4", timeout=60)

        # The worker is paused (SIGSTOP) while the web is down and restarting, so however
        # fast this machine is the run is still mid-run when the stream comes back (on a
        # quiet machine it once finished during the restart); it is resumed after.
        os.killpg(worker.pid, signal.SIGSTOP)
        web.kill()
        before = {name: (x, y) for name, x, y in page.evaluate(MEASURED_TRACES)}
        drawn_before = sum(len(x) for x, _ in before.values())
        orm(run.refresh_from_db)
        assert run.status == "running", "the run must still be going when the web dies"
        procs.web(port)
        assert fresh(run, orm).status == "running", "the run must stream on after the restart"
        os.killpg(worker.pid, signal.SIGCONT)

        # No reload: the page's EventSource reconnects by itself (Last-Event-ID).
        wait_js(page, "window.labRun.ended", timeout=120)
        expect(page.locator("#run-status")).to_have_text("Done")
        orm(run.refresh_from_db)
        points = orm(lambda: list(run.points.order_by("seq")))
        assert run.status == "done" and len(points) > drawn_before
        labels = {s.name: s.label for s in get_lab(run.lab).series}
        expected: dict[str, tuple[list, list]] = {}
        for p in points:
            xs, ys = expected.setdefault(labels[p.series], ([], []))
            xs.append(p.x)
            ys.append(p.y)
        after = {name: (x, y) for name, x, y in page.evaluate(MEASURED_TRACES)}
        assert after == {name: expected.get(name, ([], [])) for name in after}  # once each
        for name, (x, y) in before.items():  # what was drawn before is still there, first
            assert after[name][0][: len(x)] == x and after[name][1][: len(y)] == y
        assert page.evaluate("window.labRun.drawn") == len(points)
