"""In Chromium, against uvicorn (ASGI) and a real worker: a learner starts the KV-growth lab,
the chart gains points live, the table shows measured == predicted, and a reload mid-run
resumes without losing or duplicating a point."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Page, expect

from lab.models import LabRun

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery_integration,
    pytest.mark.django_db(transaction=True),
]
PASSWORD = "measure-then-believe"


@pytest.fixture
def learner(settings, redis_url, live_worker):
    settings.REDIS_URL = redis_url
    call_command("load_bank", verbosity=0)
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def log_in(page: Page, base: str) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()


def drawn(page: Page) -> int:
    return page.evaluate("window.labRun ? window.labRun.drawn : 0")


def test_kv_growth_lab_streams_to_the_chart_and_survives_a_reload(
    asgi_server, learner, orm, page: Page
):
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/")
    page.get_by_role("link", name="KV-cache growth: bytes per token, MHA vs GQA").click()
    expect(page.get_by_text("16 – 512 tokens (default 384)")).to_be_visible()
    # A bad value is refused with the reason, and nothing is queued.
    page.get_by_label("Tokens to cache").fill("5000")
    page.get_by_role("button", name="Start the run").click()
    expect(page.locator("#err-tokens")).to_have_text(
        "Tokens to cache must be at most 512 tokens, not 5000."
    )
    assert not orm(LabRun.objects.exists)
    page.get_by_label("Tokens to cache").fill("512")
    page.get_by_label("Point every").fill("2")  # many points: time to reload mid-run
    submitted = time.perf_counter()
    page.get_by_role("button", name="Start the run").click()
    page.wait_for_function("() => window.labRun && window.labRun.drawn > 0", timeout=30_000)
    first_point_s = time.perf_counter() - submitted
    print(f"\nKV-growth lab: submit -> first point on the chart: {first_point_s:.2f} s")
    # Predicted curves are there from the start; measured points keep arriving.
    traces = page.evaluate(
        "document.getElementById('lab-chart').data.map(t => [t.name, t.x.length])"
    )
    assert len(traces) == 6
    assert dict(traces)["GQA predicted"] == 2  # drawn from the start: 0 and N tokens
    run = orm(LabRun.objects.get)
    page.wait_for_function("() => window.labRun.drawn >= 20", timeout=60_000)
    page.reload()
    page.wait_for_function("() => window.labRun && window.labRun.ended", timeout=120_000)
    expect(page.locator("#run-status")).to_have_text("Done")
    total = orm(run.points.count)
    assert total > 100
    assert drawn(page) == total  # every point once: none lost, none doubled by the reload
    measured = page.evaluate(
        "document.getElementById('lab-chart').data.filter(t => !t.name.includes('predicted'))"
        ".reduce((n, t) => n + t.x.length, 0)"
    )
    assert measured == total  # the measured traces hold exactly the run's points
    # a verdict per predicted series, from the real worker's run
    expect(page.locator("#verdicts")).to_contain_text("mha-predicted (exact): matched exactly")
    page.locator("#points-details summary").click()  # the point table is folded away
    rows = page.locator("#mvp-table tbody tr")
    expect(rows.first).to_contain_text("MHA measured")
    ratios = page.locator("#mvp-table tbody tr td:nth-child(5)").all_inner_texts()
    assert ratios and set(ratios) == {"1"}  # KV bytes measured == predicted, exactly
    expect(page.locator("#run-device")).to_contain_text("CPU")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()


def test_question_pages_link_to_their_labs_and_labs_to_their_questions(
    asgi_server, learner, page: Page
):
    log_in(page, asgi_server)
    page.goto(f"{asgi_server}/lab/kv-cache-growth/")
    assert page.locator(".lab-questions li").count() >= 3
    arithmetic = page.locator(".lab-questions li", has=page.locator(".kind-arithmetic"))
    arithmetic.first.get_by_role("link").click()
    expect(page.locator(".steps")).to_be_visible()
    expect(
        page.get_by_role("link", name="KV-cache growth: bytes per token, MHA vs GQA")
    ).to_be_visible()
