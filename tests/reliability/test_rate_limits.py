"""Rate limits: each one triggers at its configured count with a clear 429, keeps what the
learner typed, and lifts when its window ends; autosave is never limited; the counters are
shared between processes (Redis) and the site keeps working when Redis is down.

Limits are set small through settings (count per 3-4 s windows). django-ratelimit counts
in fixed windows, so each burst starts at the beginning of a window (`fresh_window`) and
the reset is awaited with the Retry-After the 429 itself announces.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.cache import caches
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client, RequestFactory
from django_ratelimit.core import get_usage

from common import ratelimits
from lab.labs import get_lab
from lab.models import LabRun
from mock import services as mock_services
from mock.models import FollowUpAnswer
from questions.models import Loop, LoopItem, Question
from trainer import services
from trainer.models import Attempt, StepAnswer
from trainer.settings import ratelimit_rate

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "decode-is-memory-bound"
SCENARIO = "inference-basics-request-lifecycle"
ARITHMETIC = "inference-basics-two-phase-timing"

pytestmark = pytest.mark.django_db


@pytest.fixture
def limits(settings, redis_url):
    """Every limit off, then the test turns on the ones it checks (fast password hashing:
    the login bursts must fit in a few seconds)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RATELIMITS = dict.fromkeys(settings.RATELIMITS)

    def set_rates(**rates: str) -> None:
        settings.RATELIMITS = dict.fromkeys(settings.RATELIMITS) | {
            group.replace("_", "-"): rate for group, rate in rates.items()
        }

    return set_rates


@pytest.fixture
def bank():
    call_command("load_bank", f"{ROOT}/questions/bank/inference-basics.yaml", verbosity=0)


@pytest.fixture
def ada():
    return get_user_model().objects.create_user("ada", password=PASSWORD)


def fresh_window(
    group: str, key, *, user=None, username: str = "", email: str = "", need_s: int = 2
):
    """Wait, if needed, until the group's current window has at least `need_s` left, so a
    burst of requests is counted in one window (each key value has its own window start)."""
    request = RequestFactory().post("/", {"username": username, "email": email})
    request.user = user or AnonymousUser()
    rate = django_settings.RATELIMITS[group]
    while True:
        now = int(time.time())
        left = get_usage(request, group=group, key=key, rate=rate)["time_left"]
        if left >= need_s:
            return
        time.sleep(max(0.0, now + left + 1 - time.time()) + 0.05)  # into the next window


def wait_out(response) -> None:
    """Sleep for the Retry-After the 429 announced (an upper bound of the window's end)."""
    assert response.status_code == 429
    seconds = int(response["Retry-After"])
    assert 1 <= seconds <= 4
    time.sleep(seconds + 0.05)


def page_text(response) -> str:
    return response.content.decode()


def log_in(client: Client, username: str, password: str = "wrong", url: str = "/accounts/login/"):
    return client.post(url, {"username": username, "password": password})


# --- login --------------------------------------------------------------------------------


def test_login_per_username_triggers_at_the_limit_and_resets(limits, ada):
    limits(login_user="3/4s")
    client = Client()
    fresh_window("login-user", ratelimits.posted_username, username="ada", need_s=2)
    for _ in range(3):
        response = log_in(client, "ada")
        assert response.status_code == 200  # the form's own error
        assert "Please enter a correct username and password" in page_text(response)
    # The fourth attempt is refused before the password is checked, even the right one.
    response = log_in(client, " ADA ", PASSWORD)
    assert response.status_code == 429
    html = page_text(response)
    assert "Too many login attempts for this username (3 in 4 seconds at most)." in html
    assert re.search(r"Wait \d seconds?, then try again\.", html)
    assert 'value=" ADA "' in html  # the username stays in the form
    assert "_auth_user_id" not in client.session
    # Per username: someone else from the same address still gets the normal form.
    assert log_in(client, "bob").status_code == 200
    # The admin's login page is the same door.
    assert log_in(client, "ada", url="/admin/login/").status_code == 429
    wait_out(response)
    response = log_in(client, "ada", PASSWORD)
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(ada.pk)


# Look-alikes Django's login form folds onto the same account (UsernameField applies NFKC
# before authenticating): full-width, mathematical bold, ligature, case and spacing variants.
LOOK_ALIKES = {
    "ada": ["ａｄａ", "ＡＤＡ", "AdA", "𝐚𝐝𝐚", " ａｄa "],
    "fiona": ["ﬁona", "ＦＩＯＮＡ", "ﬁONA"],
}


@pytest.mark.parametrize("name", sorted(LOOK_ALIKES))
def test_login_per_username_counts_look_alikes_as_the_same_name(limits, name):
    """Finding 4 (issue 16): the key only lower-cased the posted name, so after 10 refusals
    for "ada", "ａｄａ" (NFKC: "ada") got 10 more password guesses at the same account."""
    get_user_model().objects.create_user(name, password=PASSWORD)
    limits(login_user="10/30s")
    fresh_window("login-user", ratelimits.posted_username, username=name, need_s=10)
    client = Client()
    for _ in range(10):
        assert log_in(client, name).status_code == 200  # wrong password: the form's error
    for variant in LOOK_ALIKES[name]:
        response = log_in(client, variant, PASSWORD)  # even with the right password
        assert response.status_code == 429, variant
        assert int(response["Retry-After"]) >= 1
        assert "Too many login attempts for this username (10 in" in page_text(response)
        assert "_auth_user_id" not in client.session, variant

    # Spread over the variants, the attempts still add up to one budget.
    caches["ratelimit"].clear()
    fresh_window("login-user", ratelimits.posted_username, username=name, need_s=10)
    variants = (LOOK_ALIKES[name] * 10)[:10]
    for variant in variants:
        assert log_in(client, variant).status_code == 200, variant
    assert log_in(client, name, PASSWORD).status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_username_key_folds_like_django_and_then_some():
    request = RequestFactory().post("/", {"username": "  ＡＤＡ "})
    assert ratelimits.posted_username("login-user", request) == "ada"
    request = RequestFactory().post("/", {"username": "Straße"})  # casefold: ß -> ss
    assert ratelimits.posted_username("login-user", request) == "strasse"
    request = RequestFactory().post("/", {"username": "x" * 500})
    assert len(ratelimits.posted_username("login-user", request)) == 150


def test_login_per_address_triggers_at_the_limit_and_resets(limits):
    limits(login_ip="3/4s")
    client = Client()
    fresh_window("login-ip", ratelimits.client_ip, need_s=2)
    for name in ("u1", "u2", "u3"):
        assert log_in(client, name).status_code == 200
    response = log_in(client, "u4")
    assert response.status_code == 429
    assert "Too many login attempts for your network address" in page_text(response)
    elsewhere = Client(REMOTE_ADDR="10.1.2.3")  # another address is not affected
    assert log_in(elsewhere, "u4").status_code == 200
    wait_out(response)
    assert log_in(client, "u4").status_code == 200


# --- sign-up --------------------------------------------------------------------------------


def signup_data(name: str) -> dict:
    return {"username": name, "password1": PASSWORD, "password2": PASSWORD}


def test_signup_per_address_counts_accounts_created_and_resets(limits):
    limits(signup_ip="2/4s")
    fresh_window("signup-ip", ratelimits.client_ip, need_s=2)
    mismatch = signup_data("typo") | {"password2": "something else"}
    assert Client().post("/accounts/signup/", mismatch).status_code == 200  # not counted
    for name in ("new1", "new2"):
        assert Client().post("/accounts/signup/", signup_data(name)).status_code == 302
    response = Client().post("/accounts/signup/", signup_data("new3"))
    assert response.status_code == 429
    html = page_text(response)
    assert "Too many accounts were created from your network address (2 in 4 seconds" in html
    assert 'value="new3"' in html
    assert not get_user_model().objects.filter(username="new3").exists()
    wait_out(response)
    assert Client().post("/accounts/signup/", signup_data("new3")).status_code == 302
    assert get_user_model().objects.filter(username="new3").exists()


# --- password change, reset ------------------------------------------------------------------


def change_password(client: Client, old: str, new: str = "a-new-password-for-ada"):
    data = {"old_password": old, "new_password1": new, "new_password2": new}
    return client.post("/accounts/password/", data)


def test_password_checks_per_learner_cover_password_and_email_changes(limits, ada):
    limits(password_change="3/4s")
    bob = get_user_model().objects.create_user("bob", password=PASSWORD)
    client = Client()
    client.force_login(ada)
    fresh_window("password-change", ratelimits.user_id, user=ada, need_s=2)
    for _ in range(2):
        response = change_password(client, "guess")
        assert response.status_code == 200 and "old password was entered incorrectly" in (
            page_text(response)
        )
    # The email form checks the same password: it spends the same budget.
    email = {"email": "ada@example.com", "current_password": "guess"}
    assert client.post("/accounts/profile/", email).status_code == 400
    response = client.post("/accounts/profile/", email | {"current_password": PASSWORD})
    assert response.status_code == 429
    html = page_text(response)
    assert "Too many attempts with your current password on this account (3 in 4 seconds" in html
    assert 'value="ada@example.com"' in html  # the address typed is kept
    response = change_password(client, PASSWORD)  # even the right one, before any check
    assert response.status_code == 429 and int(response["Retry-After"]) >= 1
    ada.refresh_from_db()
    assert ada.email == "" and ada.check_password(PASSWORD)
    other = Client()  # per learner: someone else is not affected
    other.force_login(bob)
    assert change_password(other, "guess").status_code == 200
    wait_out(response)
    assert change_password(client, PASSWORD).status_code == 302
    ada.refresh_from_db()
    assert ada.check_password("a-new-password-for-ada")


def ask_reset(client: Client, email: str):
    return client.post("/accounts/password/reset/", {"email": email})


def test_reset_requests_per_address_asked_for_whatever_its_spelling(limits, ada):
    from django.core import mail

    get_user_model().objects.filter(pk=ada.pk).update(email="ada@example.com")
    limits(reset_email="2/4s")
    fresh_window("reset-email", ratelimits.posted_email, email="ada@example.com", need_s=2)
    for spelling in ("ada@example.com", "ADA@Example.com"):
        assert ask_reset(Client(), spelling).status_code == 302
    assert len(mail.outbox) == 2
    response = ask_reset(Client(REMOTE_ADDR="10.9.9.9"), " Ada@EXAMPLE.COM ")
    assert response.status_code == 429
    html = page_text(response)
    assert "Too many password-reset requests for this email address (2 in 4 seconds" in html
    assert 'value=" Ada@EXAMPLE.COM "' in html  # kept in the form
    assert len(mail.outbox) == 2  # nothing sent
    # An unknown address is limited the same way: the 429 tells nothing about accounts.
    fresh_window("reset-email", ratelimits.posted_email, email="nobody@example.com", need_s=2)
    for _ in range(2):
        assert ask_reset(Client(), "nobody@example.com").status_code == 302
    unknown = ask_reset(Client(), "nobody@example.com")
    assert unknown.status_code == 429
    assert "for this email address (2 in 4 seconds" in page_text(unknown)
    wait_out(response)
    assert ask_reset(Client(), "ada@example.com").status_code == 302
    assert len(mail.outbox) == 3


def test_reset_requests_per_client_address(limits):
    limits(reset_ip="2/4s")
    fresh_window("reset-ip", ratelimits.client_ip, need_s=2)
    client = Client()
    for name in ("a", "b"):
        assert ask_reset(client, f"{name}@example.com").status_code == 302
    response = ask_reset(client, "c@example.com")
    assert response.status_code == 429
    assert "Too many password-reset requests for your network address" in page_text(response)
    assert ask_reset(Client(REMOTE_ADDR="10.1.2.3"), "c@example.com").status_code == 302
    wait_out(response)
    assert ask_reset(client, "c@example.com").status_code == 302


def test_reset_link_attempts_per_client_address(limits, ada):
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    limits(reset_confirm_ip="3/4s")
    uid = urlsafe_base64_encode(force_bytes(ada.pk))
    client = Client()
    fresh_window("reset-confirm-ip", ratelimits.client_ip, need_s=2)
    for guess in ("aaaaaa-0", "aaaaaa-1", "aaaaaa-2"):  # guessing tokens
        response = client.get(f"/accounts/reset/{uid}/{guess}/")
        assert response.status_code == 200 and "This link no longer works" in page_text(response)
    real = f"/accounts/reset/{uid}/{default_token_generator.make_token(ada)}/"
    response = client.get(real)  # the right token no longer gets checked from here
    assert response.status_code == 429
    html = page_text(response)
    assert "Too many password-reset link requests from your network address (3 in 4" in html
    assert 'href="/accounts/password/reset/"' in html
    # The real owner, elsewhere, is not affected.
    assert Client(REMOTE_ADDR="10.4.4.4").get(real).status_code == 302
    wait_out(response)
    assert client.get(real).status_code == 302


# --- answers ----------------------------------------------------------------------------------


def test_scenario_submit_is_limited_and_the_text_is_kept(limits, bank, ada):
    limits(answer="2/4s")
    question = Question.objects.get(slug=SCENARIO)
    done = services.attempt_start(user=ada, question=question)
    Attempt.objects.filter(pk=done.pk).update(answer="earlier", submitted=done.started)
    open_attempt = services.attempt_start(user=ada, question=question)
    client = Client()
    client.force_login(ada)
    fresh_window("answer", ratelimits.user_id, user=ada, need_s=2)
    for _ in range(2):  # the submitted attempt redirects to its review (no grading)
        assert client.post(f"/attempts/{done.pk}/submit/", {"answer": "again"}).status_code == 302
    text = "Prefill is one pass over the prompt;\ndecode is one token per step <b>bound</b>."
    response = client.post(f"/attempts/{open_attempt.pk}/submit/", {"answer": text})
    assert response.status_code == 429
    html = page_text(response)
    assert "You are sending answers faster than anyone can type them (2 in 4 seconds" in html
    assert "Your text is kept" in html
    assert "decode is one token per step &lt;b&gt;bound&lt;/b&gt;.</textarea>" in html
    open_attempt.refresh_from_db()
    assert open_attempt.draft == text and open_attempt.submitted is None
    # Autosave is never limited: the draft keeps saving while submits are refused.
    for i in range(4):
        saved = client.post(f"/attempts/{open_attempt.pk}/draft/", {"answer": f"{text} {i}"})
        assert saved.status_code == 200
    open_attempt.refresh_from_db()
    assert open_attempt.draft == f"{text} 3"
    wait_out(response)
    # Past the window the submit reaches the view again (an empty answer: its own 400).
    response = client.post(f"/attempts/{open_attempt.pk}/submit/", {"answer": " "})
    assert response.status_code == 400
    assert "Write an answer before submitting." in page_text(response)


def test_step_checks_are_limited_with_a_fragment_that_keeps_the_input(limits, bank, ada):
    limits(answer="2/4s")
    attempt = services.attempt_start(user=ada, question=Question.objects.get(slug=ARITHMETIC))
    steps = [s.name for s in attempt.question.problem.steps.order_by("order")]
    client = Client(headers={"HX-Request": "true"})
    client.force_login(ada)
    fresh_window("answer", ratelimits.user_id, user=ada, need_s=2)
    for name, value in zip(steps[:2], ("1 TFLOP", "1 ms"), strict=True):
        response = client.post(f"/attempts/{attempt.pk}/steps/{name}/", {"answer": value})
        assert response.status_code == 200 and 'class="verdict' in page_text(response)
    url = f"/attempts/{attempt.pk}/steps/{steps[2]}/"
    response = client.post(url, {"answer": "70 GB"})
    assert response.status_code == 429
    html = page_text(response)
    assert f'id="step-{steps[2]}"' in html  # the step's own <li>, swapped in place
    assert "You are sending answers faster than anyone can type them" in html
    assert 'value="70 GB"' in html  # what was typed stays in the box
    assert "<html" not in html  # a fragment, not a page
    assert not StepAnswer.objects.filter(attempt=attempt, step_name=steps[2]).exists()
    wait_out(response)
    assert client.post(url, {"answer": "70 GB"}).status_code == 200
    assert StepAnswer.objects.filter(attempt=attempt, step_name=steps[2]).exists()


def test_mock_answers_are_limited_drafts_are_not_and_nothing_is_lost(limits, bank, ada):
    limits(answer="2/4s")
    loop = Loop.objects.create(slug="limits-loop", title="Limits loop")
    LoopItem.objects.create(loop=loop, question=Question.objects.get(slug=SCENARIO), minutes=10)
    mock = mock_services.mock_start(user=ada, loop=loop)
    client = Client()
    client.force_login(ada)
    base = f"/mock/{mock.pk}/items/0"
    fresh_window("answer", ratelimits.user_id, user=ada, need_s=2)
    assert client.post(f"{base}/answer/", {"answer": "Prefill then decode."}).status_code == 302
    assert client.post(f"{base}/follow-ups/0/", {"answer": "Probe one."}).status_code == 302
    probe = "Probe two: TTFT is prefill plus queueing."
    response = client.post(f"{base}/follow-ups/1/", {"answer": probe})
    assert response.status_code == 429
    html = page_text(response)
    assert "You are sending answers faster than anyone can type them" in html
    assert f">{probe}</textarea>" in html and f'href="/mock/{mock.pk}/"' in html
    row = FollowUpAnswer.objects.get(item__mock=mock, index=1)
    assert row.draft == probe and row.submitted is None  # saved as the probe's draft
    for i in range(4):  # autosave goes on regardless
        saved = client.post(f"{base}/draft/", {"slot": "fu-1", "answer": f"{probe} {i}"})
        assert saved.status_code == 200 and "Saved" in page_text(saved)
    wait_out(response)
    assert client.post(f"{base}/follow-ups/1/", {"answer": probe}).status_code == 302
    row.refresh_from_db()
    assert row.answer == probe and row.submitted is not None


# --- lab runs -----------------------------------------------------------------------------------


def test_lab_runs_are_limited_per_learner_and_the_form_keeps_its_values(limits, settings, ada):
    limits(lab_run="2/4s")
    settings.LAB_MAX_ACTIVE_RUNS = 10  # the concurrency rule is not what this test is about
    client = Client()
    client.force_login(ada)
    fresh_window("lab-run", ratelimits.user_id, user=ada, need_s=2)
    form = {p.name: str(p.default) for p in get_lab("kv-cache-growth").params}
    bad = client.post("/lab/kv-cache-growth/", form | {"tokens": "100000"})
    assert bad.status_code == 400  # a form sent back to fix does not count
    for _ in range(2):
        assert client.post("/lab/kv-cache-growth/", form | {"dtype": "bf16"}).status_code == 302
    response = client.post("/lab/kv-cache-growth/", form | {"tokens": "256", "dtype": "fp16"})
    assert response.status_code == 429
    html = page_text(response)
    assert "You have started 2 lab runs in 4 seconds, the most allowed." in html
    assert 'value="256"' in html and '<option value="fp16" selected>' in html
    assert LabRun.objects.filter(owner=ada).count() == 2
    wait_out(response)
    ok = client.post("/lab/kv-cache-growth/", form | {"tokens": "256", "dtype": "fp16"})
    assert ok.status_code == 302
    assert LabRun.objects.filter(owner=ada).count() == 3


# --- shared, failing open, configured ----------------------------------------------------------


def test_the_counters_are_shared_between_processes(limits, bank, ada):
    """Two web processes (uvicorn --workers) count into the same Redis counter: another
    process spends the learner's budget, this one refuses the next answer."""
    limits(answer="2/60s")
    attempt = services.attempt_start(user=ada, question=Question.objects.get(slug=ARITHMETIC))
    step = attempt.question.problem.steps.order_by("order").first().name
    fresh_window("answer", ratelimits.user_id, user=ada, need_s=10)  # the child starts in ~3 s
    script = (
        "import django, os; django.setup()\n"
        "from django.conf import settings\n"
        "from django.test import RequestFactory\n"
        "from django_ratelimit.core import get_usage\n"
        "from common import ratelimits\n"
        "class U: pk = int(os.environ['LIMIT_USER'])\n"
        "r = RequestFactory().post('/'); r.user = U()\n"
        "for _ in range(2):\n"
        "    u = get_usage(r, group='answer', key=ratelimits.user_id, rate='2/60s',"
        " increment=True)\n"
        "print(u['count'], os.getpid())\n"
    )
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "trainer.settings", "LIMIT_USER": str(ada.pk)}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert out[0] == "2" and int(out[1]) != os.getpid()
    client = Client()
    client.force_login(ada)
    response = client.post(f"/attempts/{attempt.pk}/steps/{step}/", {"answer": "1 TFLOP"})
    assert response.status_code == 429


def test_with_redis_down_the_limits_fail_open_and_pages_work(limits, settings, bank, ada, caplog):
    limits(answer="1/m", login_user="1/m", login_ip="1/m")
    dead = Path(settings.VAR_DIR) / "no-redis-here.sock"
    settings.CACHES = settings.CACHES | {
        "ratelimit": settings.CACHES["ratelimit"] | {"LOCATION": f"unix://{dead}"}
    }
    attempt = services.attempt_start(user=ada, question=Question.objects.get(slug=ARITHMETIC))
    steps = [s.name for s in attempt.question.problem.steps.order_by("order")]
    client = Client()
    with caplog.at_level(logging.WARNING, logger="trainer.cache"):
        for _ in range(3):
            assert log_in(client, "ada").status_code == 200
        assert log_in(client, "ada", PASSWORD).status_code == 302
        for name, value in zip(steps[:3], ("1 TFLOP", "1 ms", "70 GB"), strict=True):
            response = client.post(f"/attempts/{attempt.pk}/steps/{name}/", {"answer": value})
            assert response.status_code == 200
    assert StepAnswer.objects.filter(attempt=attempt).count() == 3
    assert "rate-limit cache" in caplog.text and "limits are off" in caplog.text


def test_rates_come_from_the_environment_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("RATELIMIT_ANSWER", "120/m")
    assert ratelimit_rate("RATELIMIT_ANSWER", "60/m") == "120/m"
    monkeypatch.setenv("RATELIMIT_ANSWER", "off")
    assert ratelimit_rate("RATELIMIT_ANSWER", "60/m") is None
    monkeypatch.setenv("RATELIMIT_ANSWER", "sixty a minute")
    with pytest.raises(ImproperlyConfigured, match=r"RATELIMIT_ANSWER=.*count/period"):
        ratelimit_rate("RATELIMIT_ANSWER", "60/m")
    monkeypatch.delenv("RATELIMIT_ANSWER")
    assert ratelimit_rate("RATELIMIT_ANSWER", "60/m") == "60/m"


def test_the_limit_check_accepts_the_shared_cache():
    """django-ratelimit's own system checks pass on the configured cache (no E003)."""
    from django.core import checks

    found = [e for e in checks.run_checks(tags=["caches"]) if e.id.startswith("django_ratelimit")]
    assert [e.id for e in found if e.is_serious()] == []  # E003 "not atomic" is an error
    # W001 "not officially supported" (any backend outside its list) is silenced on purpose.
    assert {e.id for e in found} <= set(django_settings.SILENCED_SYSTEM_CHECKS)
    assert django_settings.CACHES["ratelimit"]["BACKEND"] == "trainer.cache.FailOpenRedisCache"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_in_the_browser_a_limited_step_check_shows_why_and_keeps_the_input(
    limits, bank, ada, live_server, orm, page
):
    """htmx swaps the 429 fragment in place (base.html's responseHandling): the learner
    sees the reason under the step, with what they typed still in the box."""
    from playwright.sync_api import expect

    def start():
        attempt = services.attempt_start(user=ada, question=Question.objects.get(slug=ARITHMETIC))
        return attempt, [s.name for s in attempt.question.problem.steps.order_by("order")]

    attempt, steps = orm(start)
    page.goto(f"{live_server.url}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{live_server.url}/attempts/{attempt.pk}/")
    limits(answer="1/30s")
    fresh_window("answer", ratelimits.user_id, user=ada, need_s=8)
    first = page.locator(f"#step-{steps[0]}")
    first.locator("input[name=answer]").fill("1 TFLOP")
    first.locator("input[name=answer]").press("Enter")
    expect(page.locator(f"#step-{steps[0]} .verdict")).to_be_visible()
    second = page.locator(f"#step-{steps[1]}")
    second.locator("input[name=answer]").fill("1 ms")
    second.locator("input[name=answer]").press("Enter")
    expect(second.locator(".input-error")).to_contain_text(
        "You are sending answers faster than anyone can type them (1 in 30 seconds at most)"
    )
    expect(second.locator("input[name=answer]")).to_have_value("1 ms")
    assert not orm(StepAnswer.objects.filter(attempt=attempt, step_name=steps[1]).exists)
