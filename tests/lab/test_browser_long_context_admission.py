"""In Chromium, against uvicorn and a real worker: the long-context-admission lab started
from its page at small size ends Done, shows the step costs it measured (the constants
line) before the run ends, and a verdict per predicted series — the exact KV displacement
held, the queueing estimate held or (under contention) inconclusive — also after a reload."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from lab.models import LabRun

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery_integration,
    pytest.mark.django_db(transaction=True),
]
SLUG = "long-context-admission"
SMALL = {"replicas": 2, "short_rate": 4, "long_count": 2, "horizon_s": 30}
PREDICTED = {"displaced-predicted", "wait-fifo-predicted"}


def test_a_small_run_from_the_lab_page_ends_done_with_its_verdicts(
    asgi_server, learner, log_in, orm, page: Page
):
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/{SLUG}/")
    for name, value in SMALL.items():
        page.locator(f"#p-{name}").fill(str(value))
    page.get_by_role("button", name="Start the run").click()
    expect(page.locator("#run-constants")).to_be_visible(timeout=60_000)
    expect(page.locator("#run-constants")).to_contain_text("MEASURED")
    page.wait_for_function("() => window.labRun && window.labRun.ended", timeout=110_000)
    run = orm(LabRun.objects.get)
    expect(page.locator("#run-status")).to_have_text("Done")
    assert run.status == LabRun.Status.DONE, run.error
    items = page.locator("#verdicts li")
    expect(items).to_have_count(len(PREDICTED))
    shown = {}
    for i in range(items.count()):
        li = items.nth(i)
        shown[li.locator("strong").inner_text()] = (li.get_attribute("data-status"),
                                                    li.inner_text())  # fmt: skip
    assert set(shown) == PREDICTED
    assert shown["displaced-predicted"][0] == "held", shown["displaced-predicted"][1]
    status, text = shown["wait-fifo-predicted"]
    assert status in ("held", "inconclusive"), text
    if status == "inconclusive":
        assert "under contention" in text
    # the per-policy totals are in the summary
    for policy in ("fifo", "cap", "pool", "chunked"):
        expect(page.locator("body")).to_contain_text(f"{policy} short ttft p99")
    page.reload()
    expect(page.locator("#verdicts li")).to_have_count(len(PREDICTED))
    expect(page.locator("#run-constants")).to_contain_text("MEASURED")
