"""Accessibility in a real Chromium: axe-core (vendored, tests/vendor/) over the main pages
fails the test on any serious or critical violation (contrast, names, labels, ARIA...);
every action is reachable by keyboard with a visible focus; form errors are tied to their
fields; charts carry a text summary of their numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Browser, expect

from lab.models import LabPoint, LabRun
from questions.models import Loop, Question
from trainer import point_checks, services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe.min.js"
PASSWORD = "accessible-to-all-2026"
SCENARIO = "kv-arith-llama3-70b-node"
RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(" | ")}`);
}"""


CHARTS_UNNAMED = """() => [...document.querySelectorAll('.chart')]
  .filter((c) => c.getAttribute('role') !== 'img' || !c.getAttribute('aria-label')
    || !document.querySelector('table'))
  .map((c) => c.id)"""
# Every focusable element the keyboard reaches, and whether its focus is visible.
TAB_STOP = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const shown = (style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2)
    || (style.boxShadow && style.boxShadow !== 'none');
  const all = [...document.querySelectorAll('*')];
  return {key: all.indexOf(el), what: el.outerHTML.slice(0, 80), shown, body: el === document.body};
}"""
FOCUSABLE = """() => [...document.querySelectorAll(
    'a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), textarea, select, summary')]
  .filter((el) => el.offsetParent !== null && !el.closest('details:not([open]) > :not(summary)'))
  .length"""


@pytest.fixture
def world():
    call_command("load_bank", verbosity=0)
    ada = get_user_model().objects.create_user("ada", password=PASSWORD)
    question = Question.objects.get(slug=SCENARIO)
    graded = services.attempt_start(user=ada, question=question)
    services.attempt_submit(attempt=graded, answer=question.model_answer)
    graded.refresh_from_db()
    point_checks.checks_skip(attempt=graded)
    fresh = services.attempt_start(user=ada, question=question)
    arithmetic = Question.objects.filter(kind=Question.Kind.ARITHMETIC).order_by("pk").first()
    practice = services.attempt_start(user=ada, question=arithmetic)
    run = LabRun.objects.create(owner=ada, lab="kv-cache-growth", status=LabRun.Status.DONE)
    LabPoint.objects.bulk_create(
        LabPoint(run=run, seq=i, series="measured", x=float(i), y=float(i)) for i in range(20)
    )
    return {
        "graded": graded.pk,
        "fresh": fresh.pk,
        "practice": practice.pk,
        "topic": question.topic.slug,
        "run": run.pk,
        "loop": Loop.objects.order_by("pk").first().slug,
    }


def test_main_pages_have_no_serious_accessibility_violations(live_server, world, browser: Browser):
    # The site's CSP refuses the injected checker's script: bypassed for the checker only.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    base = live_server.url
    found: dict[str, list[str]] = {}

    def check(url: str) -> None:
        page.goto(base + url)
        page.wait_for_load_state("load")
        page.add_script_tag(path=str(AXE))
        violations = page.evaluate(RUN_AXE)
        # A chart is an image to a screen reader: it says so, and its label points at the
        # table of its numbers on the page.
        unnamed = page.evaluate(CHARTS_UNNAMED)
        if unnamed:
            violations.append(f"charts without role=img, a label or a table: {unnamed}")
        if violations:
            found[url] = violations

    for url in ("/", "/accounts/login/", "/accounts/signup/"):
        check(url)
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as")).to_be_attached()
    for url in (
        "/",
        f"/topics/{world['topic']}/",
        f"/attempts/{world['fresh']}/",
        f"/attempts/{world['graded']}/",
        f"/attempts/{world['practice']}/",
        "/progress/",
        "/lab/",
        "/lab/kv-cache-growth/",
        f"/lab/runs/{world['run']}/",
        "/mock/",
        f"/mock/loops/{world['loop']}/",
        "/accounts/profile/",
    ):
        check(url)
    context.close()
    assert found == {}, "\n".join(f"{url}:\n  " + "\n  ".join(v) for url, v in found.items())


def test_the_keyboard_reaches_every_action_with_a_visible_focus(live_server, world, page):
    base = live_server.url
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as")).to_be_attached()
    for url in ("/", f"/attempts/{world['graded']}/", f"/attempts/{world['practice']}/"):
        page.goto(base + url)
        page.wait_for_load_state("load")
        focusable = page.evaluate(FOCUSABLE)
        seen, hidden_focus = set(), []
        for _ in range(focusable + 5):
            page.keyboard.press("Tab")
            stop = page.evaluate(TAB_STOP)
            if stop["body"]:
                continue
            seen.add(stop["key"])
            if not stop["shown"]:
                hidden_focus.append(stop["what"])
        assert hidden_focus == [], (url, hidden_focus[:5])
        # Every visible control is a tab stop (a few may share markup: at least 90%).
        assert len(seen) >= 0.9 * focusable, (url, len(seen), focusable)


def test_form_errors_are_tied_to_their_fields(live_server, world, page):
    page.goto(f"{live_server.url}/accounts/signup/")
    page.get_by_label("Username").fill("grace")
    page.get_by_label("Password", exact=True).fill("short")
    page.get_by_label("Password again").fill("different")
    page.get_by_role("button", name="Sign up").click()
    invalid = page.locator("[aria-invalid=true]")
    expect(invalid.first).to_be_attached()
    for i in range(invalid.count()):
        described = invalid.nth(i).get_attribute("aria-describedby") or ""
        texts = [page.locator(f"#{ref}").inner_text() for ref in described.split()]
        assert any(t.strip() for t in texts), (invalid.nth(i).get_attribute("name"), described)
