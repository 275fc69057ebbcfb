"""Accounts (issue 16, finding 9): the profile page with an optional email, changing the
password, resetting it by email, and the operator's `reset_link` command.

Django's test client against the real views; mail through the configured backend (the
test run's locmem outbox, and once through a real SMTP exchange); rate limits are tested
in tests/reliability/test_rate_limits.py.
"""

from __future__ import annotations

import io
import os
import re
import socketserver
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import Client
from django.urls import reverse

from trainer import account_views
from trainer.management.commands.reset_link import Command as ResetLinkCommand

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "prefill-is-compute-bound"
NEW_PASSWORD = "decode-reads-every-weight"
LINK_RE = re.compile(r"https?://[^/\s]+(/accounts/reset/[^/\s]+/[^/\s]+/)")

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_hashing(settings, redis_url):
    """Fast hashing (many logins); the rate-limit counters in the real Redis, with limits far
    above what these tests send."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def ada():
    return get_user_model().objects.create_user("ada", email="ada@example.com", password=PASSWORD)


@pytest.fixture
def bob():
    return get_user_model().objects.create_user("bob", password=PASSWORD)


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def can_log_in(username: str, password: str) -> bool:
    response = Client().post(reverse("login"), {"username": username, "password": password})
    return response.status_code == 302


def text(response) -> str:
    return response.content.decode()


def reset_path(message) -> str:
    found = LINK_RE.search(message.body)
    assert found, message.body
    return found.group(1)


def reset_with(client: Client, path: str, password: str):
    """Open a reset link and set `password` through it, as a browser would: the link
    redirects to its set-password form, which is then posted."""
    opened = client.get(path)
    if opened.status_code != 302:
        return opened
    return client.post(opened["Location"], {"new_password1": password, "new_password2": password})


# --- the profile page ---------------------------------------------------------------------


def test_the_profile_needs_a_login(client):
    response = client.get(reverse("profile"))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    response = client.post(reverse("profile"), {"email": "x@example.com"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_profile_shows_your_own_account_and_links_to_the_password_pages(ada, bob):
    page = text(signed_in(ada).get(reverse("profile")))
    assert '<dd id="account-username">ada</dd>' in page
    assert 'value="ada@example.com"' in page
    assert f'href="{reverse("password_change")}"' in page
    page = text(signed_in(bob).get(reverse("profile")))
    assert '<dd id="account-username">bob</dd>' in page
    assert "ada@example.com" not in page and ">ada<" not in page
    # The header links every signed-in page to it.
    assert f'href="{reverse("profile")}"' in text(signed_in(bob).get("/"))


def test_setting_an_email_needs_the_current_password_and_only_touches_your_account(ada, bob):
    client = signed_in(bob)
    url = reverse("profile")
    response = client.post(url, {"email": "bob@example.com"})
    assert response.status_code == 400
    assert "Enter your current password to change the address." in text(response)
    assert 'value="bob@example.com"' in text(response)  # what was typed stays in the box
    response = client.post(url, {"email": "bob@example.com", "current_password": "nope"})
    assert response.status_code == 400
    assert "Your current password was entered incorrectly." in text(response)
    bob.refresh_from_db()
    assert bob.email == ""

    response = client.post(url, {"email": "Bob@Example.COM", "current_password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == url
    bob.refresh_from_db()
    assert bob.email == "Bob@example.com"  # the domain is case-insensitive: lower-cased
    page = text(client.get(url))
    assert "Saved: reset links now go to Bob@example.com." in page
    ada.refresh_from_db()
    assert ada.email == "ada@example.com"  # nobody else's changed

    # Removing it asks for the password too.
    assert client.post(url, {"email": ""}).status_code == 400
    response = client.post(url, {"email": "", "current_password": PASSWORD})
    assert response.status_code == 302
    bob.refresh_from_db()
    assert bob.email == ""


@pytest.mark.parametrize(
    ("email", "error"),
    [
        ("not-an-address", "Enter a valid email address."),
        ("two@at@example.com", "Enter a valid email address."),
        ("a@b", "Enter a valid email address."),
        ("x" * 250 + "@example.com", "Ensure this value has at most 254 characters"),
    ],
)
def test_a_bad_email_is_refused_with_the_reason_and_kept(bob, email, error):
    client = signed_in(bob)
    response = client.post(reverse("profile"), {"email": email, "current_password": PASSWORD})
    assert response.status_code == 400
    assert error in text(response)
    bob.refresh_from_db()
    assert bob.email == ""


def test_the_email_box_stops_where_the_account_stores(bob):
    page = text(signed_in(bob).get(reverse("profile")))
    box = re.search(r'<input type="email" name="email"[^>]*>', page).group(0)
    stored = get_user_model()._meta.get_field("email").max_length
    assert account_views.EMAIL_MAX_CHARS == stored == 254
    assert f'maxlength="{stored}"' in box


# --- changing the password ------------------------------------------------------------------


def test_changing_the_password_needs_a_login(client):
    response = client.get(reverse("password_change"))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_a_wrong_current_password_changes_nothing(ada):
    client = signed_in(ada)
    response = client.post(
        reverse("password_change"),
        {"old_password": "wrong", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert response.status_code == 200
    assert "Your old password was entered incorrectly" in text(response)
    assert can_log_in("ada", PASSWORD) and not can_log_in("ada", NEW_PASSWORD)


def test_a_weak_or_mismatched_new_password_is_refused(ada):
    client = signed_in(ada)
    url = reverse("password_change")
    weak = {"old_password": PASSWORD, "new_password1": "12345678", "new_password2": "12345678"}
    assert "This password is too common." in text(client.post(url, weak))
    mismatch = weak | {"new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD + "x"}
    assert "The two password fields didn" in text(client.post(url, mismatch))
    assert can_log_in("ada", PASSWORD)


def test_changing_the_password_keeps_this_session_and_signs_out_the_others(ada):
    here, elsewhere = signed_in(ada), Client()
    assert (
        elsewhere.post(reverse("login"), {"username": "ada", "password": PASSWORD}).status_code
        == 302
    )
    response = here.post(
        reverse("password_change"),
        {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
    )
    assert response.status_code == 302 and response["Location"] == reverse("profile")
    page = text(here.get(reverse("profile")))
    assert "Your password was changed." in page and "Signed in as" in page
    assert elsewhere.get(reverse("profile")).status_code == 302  # to the login page
    assert can_log_in("ada", NEW_PASSWORD) and not can_log_in("ada", PASSWORD)


def test_the_admin_password_pages_keep_their_own_templates(ada):
    """The site's pages use their own template names: the admin's password change (which
    renders registration/password_change_form.html) still looks like the admin."""
    staff = get_user_model().objects.create_superuser("root", password=PASSWORD)
    page = text(signed_in(staff).get(reverse("admin:password_change")))
    assert 'id="site-name"' in page  # the admin's header
    assert "Inference trainer</a>" not in page


# --- resetting by email ---------------------------------------------------------------------


def test_reset_by_email_end_to_end(ada):
    client = Client()
    page = text(client.get(reverse("login")))
    assert f'href="{reverse("password_reset")}"' in page
    response = client.post(reverse("password_reset"), {"email": "ada@example.com"})
    assert response.status_code == 302 and response["Location"] == reverse("password_reset_done")
    assert "If an account on this site has that address" in text(client.get(response["Location"]))
    (message,) = mail.outbox
    assert message.to == ["ada@example.com"]
    assert message.subject == "Reset your password on Inference trainer"
    assert '"ada"' in message.body and "works once, for 1 hour" in message.body
    path = reset_path(message)

    done = reset_with(client, path, NEW_PASSWORD)
    assert done.status_code == 302 and done["Location"] == reverse("password_reset_complete")
    assert "Your new password is set" in text(client.get(done["Location"]))
    assert can_log_in("ada", NEW_PASSWORD) and not can_log_in("ada", PASSWORD)

    # Single use: the token was tied to the old password hash.
    again = Client().get(path)
    assert again.status_code == 200 and "This link no longer works" in text(again)
    assert reset_with(Client(), path, "third-password-here").status_code == 200
    assert can_log_in("ada", NEW_PASSWORD)


def test_the_reset_form_does_not_tell_whether_an_address_exists(ada):
    known = Client().post(reverse("password_reset"), {"email": "ada@example.com"})
    unknown = Client().post(reverse("password_reset"), {"email": "nobody@example.com"})
    assert (known.status_code, known["Location"]) == (unknown.status_code, unknown["Location"])
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]


def test_the_reset_address_is_matched_whatever_its_case(ada):
    """Django matches the address case-insensitively (the rate limit keys it the same way:
    test_rate_limits); a full-width look-alike is not an address at all (its validator)."""
    response = Client().post(reverse("password_reset"), {"email": "ADA@EXAMPLE.com"})
    assert response.status_code == 302
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    response = Client().post(reverse("password_reset"), {"email": "ａｄａ@example.com"})
    assert response.status_code == 200 and "Enter a valid email address." in text(response)
    assert len(mail.outbox) == 1


def test_a_bad_reset_link_is_refused_clearly(ada):
    response = Client().get(reverse("password_reset_confirm", args=["MA", "bad-token"]))
    assert response.status_code == 200
    assert "This link no longer works" in text(response)
    assert f'href="{reverse("password_reset")}"' in text(response)


def test_reset_mail_goes_out_through_a_real_smtp_server(settings, ada):
    """EMAIL_HOST configured: the reset email goes out through SMTP (a minimal server here,
    speaking the protocol to Django's smtplib-based backend)."""
    received: list[bytes] = []
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _smtp_handler(received))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = server.server_address
        settings.EMAIL_USE_TLS = False
        settings.EMAIL_TIMEOUT = 5
        response = Client().post(reverse("password_reset"), {"email": "ada@example.com"})
        assert response.status_code == 302
    finally:
        server.shutdown()
        server.server_close()
    (data,) = received
    assert b"To: ada@example.com" in data
    path = reset_path(type("M", (), {"body": data.decode()})())
    assert reset_with(Client(), path, NEW_PASSWORD).status_code == 302
    assert can_log_in("ada", NEW_PASSWORD)


def test_a_dead_smtp_server_still_answers_the_same(settings, ada, caplog):
    """Sending fails (nothing listens): the learner gets the same answer (no 500, nothing
    revealed) and the failure is logged for the operator."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = False, 2
    response = Client().post(reverse("password_reset"), {"email": "ada@example.com"})
    assert response.status_code == 302 and response["Location"] == reverse("password_reset_done")
    assert "Failed to send password reset email" in caplog.text


def _smtp_handler(received: list[bytes]):
    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            self.wfile.write(b"220 test ESMTP\r\n")
            while line := self.rfile.readline():
                verb = line[:4].upper()
                if verb == b"EHLO" or verb == b"HELO":
                    self.wfile.write(b"250 test\r\n")
                elif verb == b"DATA":
                    self.wfile.write(b"354 go on\r\n")
                    body = b""
                    while (chunk := self.rfile.readline()) not in (b".\r\n", b""):
                        body += chunk
                    received.append(body)
                    self.wfile.write(b"250 queued\r\n")
                elif verb == b"QUIT":
                    self.wfile.write(b"221 bye\r\n")
                    return
                else:  # MAIL, RCPT, RSET, NOOP
                    self.wfile.write(b"250 ok\r\n")

    return Handler


def test_mail_settings_come_from_the_environment():
    """No EMAIL_HOST: the console backend (development, and `reset_link` in production);
    EMAIL_HOST set: SMTP with the other EMAIL_* values."""
    code = (
        "from django.conf import settings as s; import django; django.setup(); "
        "print(s.EMAIL_BACKEND, s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_USE_TLS, s.EMAIL_TIMEOUT,"
        " s.PASSWORD_RESET_TIMEOUT, s.SITE_URL, sep='|')"
    )

    def settings_with(env: dict[str, str]) -> subprocess.CompletedProcess:
        base = {k: v for k, v in os.environ.items() if not k.startswith("EMAIL_")}
        return subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=base | {"DJANGO_SETTINGS_MODULE": "trainer.settings"} | env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    out = settings_with({}).stdout.strip().split("|")
    assert out == [
        "django.core.mail.backends.console.EmailBackend", "", "587", "True", "10.0", "3600",
        "http://127.0.0.1:8000",
    ]  # fmt: skip
    env = {"EMAIL_HOST": "smtp.example.com", "EMAIL_PORT": "2525", "EMAIL_USE_TLS": "0"}
    out = (
        settings_with(env | {"SITE_URL": "https://trainer.example.com/"}).stdout.strip().split("|")
    )
    assert out[:5] == [
        "django.core.mail.backends.smtp.EmailBackend", "smtp.example.com", "2525", "False",
        "10.0",
    ]  # fmt: skip
    assert out[-1] == "https://trainer.example.com"
    ssl = settings_with({"EMAIL_HOST": "x", "EMAIL_PORT": "465", "EMAIL_USE_SSL": "1"})
    assert ssl.stdout.strip().split("|")[2:4] == ["465", "False"]  # no STARTTLS over SSL
    both = settings_with({"EMAIL_HOST": "x", "EMAIL_USE_SSL": "1", "EMAIL_USE_TLS": "1"})
    assert both.returncode != 0 and "EMAIL_USE_TLS and EMAIL_USE_SSL are exclusive" in both.stderr
    bad = settings_with({"SITE_URL": "trainer.example.com"})
    assert bad.returncode != 0 and "SITE_URL='trainer.example.com' must be" in bad.stderr


# --- the operator's reset link ----------------------------------------------------------------


def reset_link(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("reset_link", *args, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_the_command_prints_a_link_that_works_once(bob):
    link, note = reset_link("bob")
    assert link.startswith("http://127.0.0.1:8000/accounts/reset/")
    assert "works once, for 1 hour" in note
    path = LINK_RE.match(link).group(1)
    assert reset_with(Client(), path, NEW_PASSWORD).status_code == 302
    assert can_log_in("bob", NEW_PASSWORD)
    second = reset_with(Client(), path, "yet-another-password-1")
    assert second.status_code == 200 and "This link no longer works" in text(second)
    assert can_log_in("bob", NEW_PASSWORD) and not can_log_in("bob", "yet-another-password-1")


def test_the_command_link_expires_after_an_hour(bob, monkeypatch):
    link, _ = reset_link("bob", "--base-url", "https://trainer.example.com/")
    assert link.startswith("https://trainer.example.com/accounts/reset/")
    path = LINK_RE.match(link).group(1)
    issued = default_token_generator._now()

    monkeypatch.setattr(default_token_generator, "_now", lambda: issued + timedelta(seconds=3601))
    late = reset_with(Client(), path, NEW_PASSWORD)
    assert late.status_code == 200 and "This link no longer works" in text(late)
    bob.refresh_from_db()  # (not by logging in: a login, too, spends outstanding links)
    assert bob.check_password(PASSWORD)

    # The same link 58 minutes on still works (it is the hour that ran out above).
    monkeypatch.setattr(default_token_generator, "_now", lambda: issued + timedelta(seconds=3500))
    assert reset_with(Client(), path, NEW_PASSWORD).status_code == 302
    assert can_log_in("bob", NEW_PASSWORD)


def test_a_token_made_over_an_hour_ago_is_refused(bob):
    gen = default_token_generator
    old = gen._make_token_with_timestamp(bob, gen._num_seconds(gen._now()) - 3601, gen.secret)
    fresh = gen._make_token_with_timestamp(bob, gen._num_seconds(gen._now()) - 3500, gen.secret)
    uid = LINK_RE.match(reset_link("bob")[0]).group(1).split("/")[3]
    assert "no longer works" in text(Client().get(f"/accounts/reset/{uid}/{old}/"))
    assert Client().get(f"/accounts/reset/{uid}/{fresh}/").status_code == 302


def test_the_command_refuses_unknown_and_deactivated_users_with_a_nonzero_exit(
    bob, capsys, monkeypatch
):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        reset_link("nobody")
    # From the command line: a message on stderr and exit status 1, nothing on stdout.
    # (run_from_argv closes the database connections when done: not the test's one.)
    monkeypatch.setattr(connections, "close_all", lambda: None)
    with pytest.raises(SystemExit) as exited:
        ResetLinkCommand().run_from_argv(["manage.py", "reset_link", "nobody"])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert "No user named 'nobody'" in captured.err and captured.out == ""
    with pytest.raises(CommandError, match="is not a URL"):
        reset_link("bob", "--base-url", "trainer.example.com")
    get_user_model().objects.filter(pk=bob.pk).update(is_active=False)
    with pytest.raises(CommandError, match="'bob' is deactivated"):
        reset_link("bob")


def test_the_command_finds_a_username_typed_with_look_alikes(bob):
    link, _ = reset_link("ｂｏｂ")  # full-width: NFKC, as at sign-up
    assert link.startswith("http://127.0.0.1:8000/accounts/reset/")
