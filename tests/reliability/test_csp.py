"""Content-Security-Policy: every response carries the policy (scripts from 'self' only: no
inline script, no event-handler attributes, no eval), and in Chromium the main pages work
under it with no violation: `securitypolicyviolation` events, console CSP errors and
uncaught page errors are collected on every page and must stay empty."""

from __future__ import annotations

import contextlib

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from lab.models import LabRun
from mock.models import MockInterview
from questions.models import Question
from trainer.demo import DEMO_AUTHOR, demo_users_ensure
from trainer.grading import rubric

PASSWORD = "policy-before-payload"
SCENARIO = "inference-basics-request-lifecycle"
ARITHMETIC = "kv-arith-sequences-that-fit"
EXPECTED = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
}

# Installed before any page script: records every violation the browser reports, and stands
# in for window.print (headless Chromium would open nothing) so the Print button is checked.
WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"}`
    + ` at ${e.sourceFile}:${e.lineNumber} sample=${JSON.stringify(e.sample)}`);
}, true);
window.__printed = 0;
window.print = () => { window.__printed += 1; };
"""


def policy(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


@pytest.mark.django_db
def test_every_page_response_carries_the_policy(client, admin_client):
    call_command("load_bank", verbosity=0)
    urls = ["/", "/accounts/login/", "/accounts/signup/", "/topics/kv-cache-arithmetic/",
            "/healthz", "/no-such-page/", "/admin/login/"]  # fmt: skip
    for url in urls:
        response = client.get(url)
        assert "Content-Security-Policy" in response.headers, url
        assert policy(response.headers["Content-Security-Policy"]) == EXPECTED, url
    question = Question.objects.get(slug=SCENARIO)
    response = admin_client.get(f"/admin/questions/question/{question.pk}/change/")
    assert response.status_code == 200
    assert policy(response.headers["Content-Security-Policy"]) == EXPECTED
    # No template the site renders carries inline script any more.
    for url in [*urls, f"/admin/questions/question/{question.pk}/change/"]:
        body = admin_client.get(url).content.decode()
        assert " onclick=" not in body and "javascript:" not in body, url


def stand_in_grade(answer, points, prompt=""):
    """Every point hit, with the answer's first sentence as evidence: fast, no model."""
    first = answer.split(".")[0]
    results = tuple(
        rubric.PointResult(i, True, 0.9, (), first, p.penalty, p.weight, (first,))
        for i, p in enumerate(points)
    )
    return rubric.RubricResult(1.0, results, 0.5)


class Watcher:
    """Collects CSP violations, console CSP errors and uncaught errors of one page."""

    def __init__(self, page: Page, name: str):
        self.page, self.name = page, name
        self.console: list[str] = []
        self.errors: list[str] = []
        self.checked: list[str] = []
        page.add_init_script(WATCH)
        page.on(
            "console",
            lambda m: (
                self.console.append(m.text)
                if "Content Security Policy" in m.text or "Content-Security-Policy" in m.text
                else None
            ),
        )
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def check(self) -> None:
        url = self.page.url
        events = self.page.evaluate("window.__csp || []")
        assert events == [], f"{self.name} {url}: {events}"
        assert self.console == [], f"{self.name} {url}: {self.console}"
        assert self.errors == [], f"{self.name} {url}: {self.errors}"
        self.checked.append(url)


def log_in(page: Page, base: str, name: str, password: str = PASSWORD) -> None:
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text(f"Signed in as {name}")).to_be_visible()


@pytest.fixture
def site_data():
    call_command("load_bank", verbosity=0)
    for name in ("ada", "bob"):
        get_user_model().objects.create_user(name, password=PASSWORD)
    demo_users_ensure()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_main_pages_work_under_the_policy(
    asgi_server, redis_url, settings, monkeypatch, site_data, orm, browser: Browser
):
    monkeypatch.setattr(rubric, "grade", stand_in_grade)
    if hasattr(settings, "RATELIMITS"):  # counters live in the session's Redis
        settings.RATELIMITS = {group: "100000/m" for group in settings.RATELIMITS}
    base = asgi_server
    learner_ctx, interviewer_ctx, author_ctx = (browser.new_context() for _ in range(3))
    page = learner_ctx.new_page()
    w = Watcher(page, "learner")

    # Anonymous home, then the htmx topic filter.
    page.goto(f"{base}/")
    page.get_by_label("Filter topics").fill("kv")
    expect(page).to_have_url(f"{base}/?q=kv")
    w.check()

    log_in(page, base, "ada")
    page.goto(f"{base}/topics/kv-cache-arithmetic/")
    expect(page.locator("table.questions")).to_be_visible()
    w.check()

    # Scenario practice: autosave (htmx), submit, feedback, self-assessment (htmx).
    page.goto(f"{base}/practice/{SCENARIO}/")
    page.get_by_label("Your answer").press_sequentially("Tokenise, prefill. Then decode.")
    expect(page.locator("#autosave-status")).to_contain_text("Draft saved", timeout=10_000)
    page.get_by_role("button", name="Submit for grading").click()
    expect(page.get_by_role("heading", name="Score:")).to_be_visible()
    expect(page.locator("mark.evidence").first).to_be_visible()
    page.get_by_role("button", name="Save my assessment").click()
    expect(page.locator("#self-assessment .scores")).to_contain_text("Grader:")
    w.check()

    # Arithmetic practice: one step answered through htmx.
    page.goto(f"{base}/practice/{ARITHMETIC}/")
    step = page.locator("#step-kv_kib_per_token input[name=answer]")
    step.fill("320 KiB")
    step.press("Enter")
    expect(page.locator("#step-kv_kib_per_token .verdict")).to_be_visible()
    w.check()

    # Progress: Plotly draws under the policy.
    page.goto(f"{base}/progress/")
    expect(page.locator("#chart-history .main-svg").first).to_be_attached()
    expect(page.locator("#chart-competencies .main-svg").first).to_be_attached()
    w.check()

    # Lab: the form (a refused value, then a run), the run page: the predicted curve drawn
    # by Plotly, the SSE stream open (no worker serves the queue here, so the run waits),
    # then Cancel (fetch) and the status the stream reports.
    page.goto(f"{base}/lab/kv-cache-growth/")
    page.get_by_label("Tokens to cache").fill("5000")
    page.get_by_role("button", name="Start the run").click()
    expect(page.locator("#err-tokens")).to_be_visible()
    page.get_by_label("Tokens to cache").fill("64")
    page.get_by_label("Prompt tokens").fill("32")
    page.get_by_role("button", name="Start the run").click()
    expect(page.locator("#lab-chart .main-svg").first).to_be_attached()
    expect(page.locator("#lab-chart .scatterlayer .trace").first).to_be_attached()
    page.wait_for_function("() => window.labRun && window.labRun.source", timeout=10_000)
    cancel = page.get_by_role("button", name="Cancel")
    if cancel.is_visible():  # (a session-wide worker may have run it, or be running it)
        # The run may end meanwhile and the button hide: then there is nothing to cancel.
        with contextlib.suppress(PlaywrightTimeoutError):
            cancel.click(timeout=5_000)
    page.wait_for_function("() => window.labRun.ended", timeout=60_000)
    status = orm(LabRun.objects.get).status
    assert status in {"cancelled", "done"}
    expect(page.locator("#run-status")).to_have_attribute("data-status", status)
    w.check()
    page.goto(f"{base}/lab/runs/")
    w.check()

    # Mock: start, answer, follow-up, invite; the interviewer joins in another browser.
    page.goto(f"{base}/mock/loops/inference-warm-up/")
    page.get_by_role("button", name="Start the loop").click()
    expect(page.locator("#question-clock")).to_be_visible()
    page.get_by_label("Your answer").fill("Prefill is compute-bound. Decode is bandwidth-bound.")
    page.get_by_role("button", name="Submit answer").click()
    expect(page.get_by_text("Follow-up 1 of 4:")).to_be_visible()
    page.get_by_text("Peer interviewer").click()
    page.get_by_role("button", name="Create an invite link").click()
    page.get_by_text("Peer interviewer").click()
    link = page.locator("#invite-url").input_value()
    w.check()

    seat = interviewer_ctx.new_page()
    wi = Watcher(seat, "interviewer")
    log_in(seat, base, "bob")
    seat.goto(link)
    seat.get_by_role("button", name="Take the interviewer seat").click()
    expect(seat.get_by_text("You are interviewing")).to_be_visible()
    seat.wait_for_function("() => window.mockLive && window.mockLive.connected", timeout=15_000)
    page.locator("#follow-up-answer").press_sequentially("Attention grows quadratically")
    seat.wait_for_function("() => window.mockLive.answers > 0", timeout=15_000)
    first = seat.locator("section.interviewer-item").first
    first.locator("input[name=point]").first.check()
    expect(first.locator(".mark-status")).to_contain_text("Saved", timeout=10_000)
    wi.check()

    # "End the loop now" asks first (site.js, no inline handler): dismiss, then accept.
    page.once("dialog", lambda d: d.dismiss())
    page.get_by_role("button", name="End the loop now").click()
    expect(page.locator("#question-clock")).to_be_visible()
    assert orm(MockInterview.objects.get, user__username="ada").finished is None
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="End the loop now").click()
    expect(page.locator("#verdict h2")).to_contain_text("Verdict:", timeout=30_000)
    page.get_by_role("button", name="Print").click()
    assert page.evaluate("window.__printed") == 1
    w.check()
    seat.goto(seat.url)
    expect(seat.get_by_text("You are interviewing")).to_be_visible()
    wi.check()

    page.goto(f"{base}/mock/loops/inference-warm-up/")
    expect(page.locator("#chart-mock-history .main-svg").first).to_be_attached()
    w.check()

    # Admin: the question change form and its live htmx preview.
    author = author_ctx.new_page()
    wa = Watcher(author, "author")
    question = orm(Question.objects.get, slug=ARITHMETIC)
    author.goto(f"{base}/admin/login/?next=/admin/questions/question/{question.pk}/change/")
    author.fill("#id_username", DEMO_AUTHOR.username)
    author.fill("#id_password", DEMO_AUTHOR.password)
    author.click("input[type=submit]")
    preview = author.locator("#preview")
    expect(preview).to_contain_text("Reference answer:", timeout=20_000)
    author.fill("#id_prompt", "Size the cache for **this variant**.")
    expect(preview.locator("strong", has_text="this variant")).to_be_visible()
    author.click("#preview-redraw")
    wa.check()
    author.goto(f"{base}/admin/questions/question/")
    wa.check()
    author.goto(f"{base}/lab/queue/")
    wa.check()

    checked = len(w.checked) + len(wi.checked) + len(wa.checked)
    print(f"CSP: {checked} page states checked, 0 violations")

    # The harness sees a violation when there is one: inline script is blocked and reported.
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__inline = 1'; document.body.append(s); }"
    )
    page.wait_for_function("() => window.__csp.length > 0")
    assert page.evaluate("window.__inline") is None
    assert "script-src" in page.evaluate("window.__csp[0]")
    for ctx in (learner_ctx, interviewer_ctx, author_ctx):
        ctx.close()
