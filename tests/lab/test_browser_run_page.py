"""The run page in Chromium (issue 21, item 7): summary numbers with units on the first
render and after a reload, verdicts per series, "Cancelling…" surviving a reload, the points
table collapsed under the chart with a CSV of every point, and at 390 px the chart first
with nothing overflowing sideways."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from lab.models import LabPoint, LabRun

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "measure-then-believe"


@pytest.fixture
def ada(settings, redis_url):
    settings.REDIS_URL = redis_url
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def finished_run(owner) -> LabRun:
    now = timezone.now()
    summary = {
        "constants": "float32 on CPU: test, torch 2: read 27.9 GB/s (32 MiB buffer)",
        "ttft_ms_longest_prompt": 12.345678901,
        "read_bandwidth_gb_s": 0.30000000000000004,
        "prefill_tokens_per_s": 41234.56789,
        "weight_mb": 17.3,
        "tpot_growth_1_to_largest_batch": 2.2222222,
        "points": 40,
        "verdicts": [{"series": "prefill-roofline", "claim": "bound", "status": "held",
                      "text": "held: measured stayed above the bound (closest 1.30× at x=16)"}],
    }  # fmt: skip
    run = LabRun.objects.create(owner=owner, lab="two-phase", status=LabRun.Status.DONE,
                                params={"max_prompt_tokens": 64}, started=now, finished=now,
                                heartbeat=now, summary=summary, worker="w", device="CPU: t")  # fmt: skip
    LabPoint.objects.bulk_create(
        LabPoint(run=run, seq=i, series="prefill", x=16 + i, y=1.0 + i / 10,
                 extra={"predicted": 0.5, "lo": 0.9 + i / 10, "hi": 1.2 + i / 10})
        for i in range(40)
    )  # fmt: skip
    return run


def test_summary_has_units_before_and_after_a_reload_and_points_fold_away(
    asgi_server, ada, orm, page: Page
):
    run = orm(finished_run, ada)
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/runs/{run.pk}/")
    for _ in range(2):  # the first render, then a reload
        summary = page.locator("#summary-table")
        expect(summary).to_contain_text("12.3 ms")
        expect(summary).to_contain_text("0.3 GB/s")
        expect(summary).to_contain_text("41,235 tok/s")
        expect(summary).to_contain_text("17.3 MB")
        expect(summary).to_contain_text("2.22×")
        assert "0.30000000000000004" not in summary.inner_text()
        expect(page.locator("#verdicts")).to_contain_text("prefill-roofline (bound): held")
        page.reload()
    details = page.locator("#points-details")
    expect(details).not_to_have_attribute("open", "")
    expect(page.locator("#mvp-table")).to_be_hidden()  # collapsed: not 40 rows tall
    with page.expect_download() as dl:
        page.locator("#points-csv").click()
    lines = Path(dl.value.path()).read_text().splitlines()
    assert lines[0] == "seq,series,x,y,extra" and len(lines) == 41
    assert lines[1].startswith("0,prefill,16.0,1.0,")
    # the spread of each point's repeats is drawn as error bars
    bars = page.evaluate("document.getElementById('lab-chart').data"
                         ".find(t => t.name.startsWith('Prefill step')).error_y.array")  # fmt: skip
    assert len(bars) == 40 and bars[0] == pytest.approx(0.2)


def test_cancelling_survives_a_reload(asgi_server, ada, orm, page: Page):
    def running():
        now = timezone.now()
        return LabRun.objects.create(owner=ada, lab="two-phase", status=LabRun.Status.RUNNING,
                                     started=now, heartbeat=now, cancel_requested=True)  # fmt: skip

    run = orm(running)
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/runs/{run.pk}/")
    expect(page.locator("#run-status")).to_have_text("Cancelling…")
    page.reload()
    expect(page.locator("#run-status")).to_have_text("Cancelling…")
    orm(lambda: LabRun.objects.filter(pk=run.pk).update(status=LabRun.Status.CANCELLED))
    page.reload()
    expect(page.locator("#run-status")).to_have_text("Cancelled")


def test_at_390_px_the_chart_comes_first_and_nothing_overflows(
    asgi_server, ada, orm, browser: Browser
):
    run = orm(finished_run, ada)
    context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True)
    page = context.new_page()
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/runs/{run.pk}/")
    page.locator("#points-details summary").click()  # even with the table open
    expect(page.locator("#mvp-table")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    chart = page.locator("#lab-chart").bounding_box()
    for later in ("#summary-table", "#mvp-table", "#verdicts"):
        assert page.locator(later).bounding_box()["y"] > chart["y"]
    assert chart["x"] >= 0 and chart["x"] + chart["width"] <= 390
    context.close()


def quantization_run(owner) -> LabRun:
    now = timezone.now()
    run = LabRun.objects.create(owner=owner, lab="quantization", status=LabRun.Status.DONE,
                                params={}, started=now, finished=now, heartbeat=now,
                                summary={"points": 6}, worker="w", device="CPU: t")  # fmt: skip
    rows = [("weight-mb", 16, 10.2), ("weight-mb", 8, 6.7), ("weight-mb", 4, 5.1),
            ("ms-per-token", 16, 36.0), ("ms-per-token", 8, 19.0), ("ms-per-token", 4, 11.0)]  # fmt: skip
    LabPoint.objects.bulk_create(
        LabPoint(run=run, seq=i, series=s, x=x, y=y, extra={}) for i, (s, x, y) in enumerate(rows)
    )
    return run


@pytest.mark.parametrize("width", [1280, 390])
def test_a_third_quantity_gets_its_own_titled_axis(asgi_server, ada, orm, page: Page, width):
    # quantization: perplexity (y), weight MB (y2) and decode ms/token (y3), each in its unit
    page.set_viewport_size({"width": width, "height": 900})
    run = orm(quantization_run, ada)
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/runs/{run.pk}/")
    page.wait_for_function("document.getElementById('lab-chart').data?.length > 0")
    axes = page.evaluate("""() => {
        const c = document.getElementById('lab-chart');
        const by = Object.fromEntries(c.data.map(t => [t.name, t.yaxis]));
        return {by, y2: c.layout.yaxis2.title.text, y3: c.layout.yaxis3.title.text,
                domain: c.layout.xaxis.domain};
    }""")
    assert axes["by"]["decode ms/token at batch 1 (speed model, measured)"] == "y3"
    assert axes["by"]["weight MB (measured)"] == "y2"
    assert axes["by"]["perplexity, all held-out windows"] == "y"
    assert (axes["y2"], axes["y3"]) == ("weight MB", "decode ms/token")
    assert axes["domain"][1] < 1  # the plot leaves the third axis room
    assert page.evaluate("document.documentElement.scrollWidth") <= width
