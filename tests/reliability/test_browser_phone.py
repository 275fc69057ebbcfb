"""Every learner page on a 390 px phone, in a real Chromium: nothing wider than the screen
(the page never scrolls sideways), and no request the page makes comes back 404 (the
favicon included)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from playwright.sync_api import Browser, expect

from lab.models import LabPoint, LabRun
from mock.models import MockInterview
from questions.models import Loop, Question
from trainer import point_checks, services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "phone-width-390"
SCENARIO = "kv-arith-llama3-70b-node"
PHONE = {"width": 390, "height": 844}

# Elements wider than the viewport, with what they are: the test's message names them.
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= width + 1) continue;
    let clipped = false;  // inside a box that scrolls or clips on its own: fine
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll' || o === 'hidden') { clipped = true; break; }
    }
    if (!clipped) wide.push(`${el.tagName.toLowerCase()}.${el.className} right=${Math.round(r.right)}`);
  }
  return {scroll: document.documentElement.scrollWidth, width, wide: wide.slice(0, 12)};
}"""


@pytest.fixture
def world():
    call_command("load_bank", verbosity=0)
    ada = get_user_model().objects.create_user("ada", password=PASSWORD)
    question = Question.objects.get(slug=SCENARIO)
    graded = services.attempt_start(user=ada, question=question)
    services.attempt_submit(attempt=graded, answer=question.model_answer)
    graded.refresh_from_db()
    point_checks.checks_skip(attempt=graded)  # the feedback page itself, not the checks
    arithmetic = Question.objects.filter(kind=Question.Kind.ARITHMETIC).order_by("pk").first()
    practice = services.attempt_start(user=ada, question=arithmetic)
    run = LabRun.objects.create(
        owner=ada, lab="kv-cache-growth", params={}, status=LabRun.Status.DONE, summary={}
    )
    LabPoint.objects.bulk_create(
        LabPoint(run=run, seq=i, series="measured", x=float(i), y=float(i * i)) for i in range(200)
    )
    loop = Loop.objects.order_by("pk").first()
    return {
        "graded": graded.pk,
        "practice": practice.pk,
        "topic": question.topic.slug,
        "run": run.pk,
        "loop": loop.slug,
    }


def test_every_learner_page_fits_a_390px_phone(live_server, world, browser: Browser, orm):
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    base = live_server.url
    for url in ("/", "/accounts/login/", "/accounts/signup/"):
        page.goto(base + url)
        assert page.evaluate(OVERFLOW_JS)["wide"] == [], url
    page.goto(f"{base}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_text("Signed in as")).to_be_attached()

    pages = [
        "/",
        f"/topics/{world['topic']}/",
        f"/attempts/{world['graded']}/",
        f"/attempts/{world['practice']}/",
        "/progress/",
        "/lab/",
        "/lab/kv-cache-growth/",
        f"/lab/runs/{world['run']}/",
        "/lab/runs/",
        "/mock/",
        f"/mock/loops/{world['loop']}/",
        "/accounts/profile/",
        "/accounts/password/",
    ]
    failures = []
    for url in pages:
        response = page.goto(base + url)
        assert response is not None and response.status == 200, (url, response and response.status)
        page.wait_for_load_state("load")
        found = page.evaluate(OVERFLOW_JS)
        if found["scroll"] > found["width"] + 1 or found["wide"]:
            failures.append(
                f"{url}: page {found['scroll']} px wide on {found['width']}: {found['wide']}"
            )
    mocks = orm(lambda: MockInterview.objects.count())
    assert mocks == 0  # walking the pages started nothing
    assert failures == [], "\n".join(failures)
    assert missing == [], f"404s while walking the site: {missing}"
    context.close()
