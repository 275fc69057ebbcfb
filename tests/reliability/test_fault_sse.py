"""A browser losing its live connection mid-run (headless Chromium, real processes: our own
`redis-server`, `uvicorn trainer.asgi:application` and `celery -A trainer worker`).

The lab run page draws points pushed over SSE. Twice mid-run the web server is killed
(SIGKILL) and started again on the same port (the worker is paused meanwhile, so the run is
surely still measuring when the stream returns). The first time the browser is also
offline for a while (Chromium's offline mode does not cut an open stream, so the kill
does): EventSource's own retries fail, then one succeeds with `Last-Event-ID`. The second
time a retry gets a proxy's 502, on which EventSource gives up: the page opens a new one
(`?last_id=`). The chart must end with exactly the run's points: none lost, none drawn
twice, and the server must not have sent any point twice either (every `point` event the
page received is recorded)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import BrowserContext, Page, expect
from procs import Procs, RedisServer, free_port, wait_for

from lab.models import LabRun

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery_integration,
    pytest.mark.django_db(transaction=True),
]
PASSWORD = "last-event-id-please"

# Records every SSE `point` event and every connection error/open the page sees, before
# lab_run.js runs (the page's own code de-duplicates; this shows what the server sent).
RECORD_EVENTS = """
(() => {
  const Original = window.EventSource;
  window.__sse = { seqs: [], errors: 0, opens: 0 };
  window.EventSource = class extends Original {
    constructor(url, init) {
      super(url, init);
      this.addEventListener("point", (e) => window.__sse.seqs.push(JSON.parse(e.data).seq));
      this.addEventListener("error", () => { window.__sse.errors += 1; });
      this.addEventListener("open", () => { window.__sse.opens += 1; });
    }
  };
})();
"""


def wait_js(page: Page, expression: str, timeout: float, what: str):
    """Poll a JS expression from here (the site's CSP forbids the eval that
    page.wait_for_function uses)."""
    return wait_for(lambda: page.evaluate(expression), timeout, what)


def sse(page: Page) -> dict:
    return page.evaluate("window.__sse")


def drawn(page: Page) -> int:
    return page.evaluate("window.labRun ? window.labRun.drawn : 0")


@pytest.fixture
def ada():
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def test_the_chart_keeps_every_point_once_across_dropped_connections(
    ada, tmp_path, orm, page: Page, context: BrowserContext
):
    redis_server = RedisServer(log_dir=tmp_path).start()
    try:
        # The worker is paused for a while below: its run must not be reaped as dead.
        with Procs(redis_server.url, LAB_STALE_SECONDS="600") as procs:
            worker = procs.worker("ssefault", queues="lab-cpu", OMP_NUM_THREADS="1")
            port = free_port()
            web = procs.web(port)
            base = web.info["url"]
            context.add_init_script(RECORD_EVENTS)
            page.goto(f"{base}/accounts/login/")
            page.get_by_label("Username").fill("ada")
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
            page.goto(f"{base}/lab/kv-cache-growth/")
            # A long run (a point per token): it is cancelled once the drops are done.
            page.get_by_label("Tokens to cache").fill("512")
            page.get_by_label("Prompt tokens").fill("16")
            page.get_by_label("Point every").fill("1")
            page.get_by_role("button", name="Start the run").click()
            wait_js(page, "window.labRun && window.labRun.drawn >= 3", 120, "the first points")
            run = orm(LabRun.objects.get)
            embedded = json.loads(page.locator("#lab-run-data").text_content())["points"]

            requests = []  # every stream request the page makes from now on
            page.on("request", lambda r: "/events" in r.url and requests.append(r))

            # Drop 1: the web server dies (SIGKILL) mid-stream; the browser is offline while
            # a new one starts on the same port and for a few seconds after, so EventSource's
            # own retries fail for both reasons before one succeeds. The worker is paused
            # (SIGSTOP) meanwhile, so that however fast this machine is, the run is still
            # mid-run when the stream comes back; it is resumed after.
            os.killpg(worker.pid, signal.SIGSTOP)
            before = sse(page)
            web.kill()
            wait_for(lambda: sse(page)["errors"] > before["errors"], 30, "the stream to drop")
            last_drawn = page.evaluate("window.labRun.lastSeq")
            context.set_offline(True)
            web = procs.web(port)
            time.sleep(4.0)  # longer than EventSource's retry delay (3 s in Chromium)
            assert sse(page)["opens"] == before["opens"]
            context.set_offline(False)
            wait_for(lambda: sse(page)["opens"] > before["opens"], 60, "a reconnection")
            resent = [r.all_headers().get("last-event-id") for r in requests]
            assert str(last_drawn) in resent  # the browser's own retry sent Last-Event-ID
            assert orm(LabRun.objects.get, pk=run.pk).status == "running"
            os.killpg(worker.pid, signal.SIGCONT)
            at = drawn(page)
            wait_for(lambda: drawn(page) > at, 60, "new points after the reconnection")
            print(f"\ndrop 1: {sse(page)['errors'] - before['errors']} connection errors")

            # Drop 2: killed again, and the first retry gets a proxy's 502, on which
            # EventSource gives up for good: the page must open a new one by itself.
            bad_gateway: list[str] = []

            def first_attempt_fails(route):
                if bad_gateway:
                    route.continue_()
                else:
                    bad_gateway.append(route.request.url)
                    route.fulfill(status=502, body="Bad Gateway")

            os.killpg(worker.pid, signal.SIGSTOP)
            before = sse(page)
            page.route("**/lab/runs/*/events*", first_attempt_fails)
            web.kill()
            wait_for(lambda: sse(page)["errors"] > before["errors"], 30, "the stream to drop")
            web = procs.web(port)
            wait_for(lambda: sse(page)["opens"] > before["opens"], 60, "a new EventSource")
            assert len(bad_gateway) == 1
            assert orm(LabRun.objects.get, pk=run.pk).status == "running"
            os.killpg(worker.pid, signal.SIGCONT)
            at = drawn(page)
            wait_for(lambda: drawn(page) > at, 60, "new points after the second reconnection")

            # End the run (cancel: stops at its next point) and let the stream close.
            page.get_by_role("button", name="Cancel").click()
            wait_js(page, "window.labRun.ended", 60, "the end of the stream")
            expect(page.locator("#run-status")).to_have_text("Cancelled")
            orm(run.refresh_from_db)
            total = orm(run.points.count)
            assert run.status == "cancelled" and total > 0

            # The chart holds exactly the run's points...
            assert drawn(page) == total
            measured = page.evaluate(
                "document.getElementById('lab-chart').data"
                ".filter(t => !t.name.includes('predicted'))"
                ".reduce((n, t) => n + t.x.length, 0)"
            )
            assert measured == total
            # ... and what the server sent (embedded in the page + every SSE point event,
            # over three connections) is each seq exactly once.
            received = [p["seq"] for p in embedded] + sse(page)["seqs"]
            assert sorted(received) == list(range(total)), "a point was lost or sent twice"
            assert sse(page)["opens"] >= 3
            print(f"\n{total} points over {sse(page)['opens']} connections, none lost or doubled")
    finally:
        redis_server.kill()
