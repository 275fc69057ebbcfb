"""Rate limits (django-ratelimit) on logging in, signing up, submitting answers, starting
lab runs, changing a password or email and resetting a password, with a 429 that says what
happened, how long to wait, and that nothing typed was lost.

Limits come from settings.RATELIMITS ({group: "count/period"}, from RATELIMIT_* in the
environment; "off" disables one). Counters live in the `ratelimit` cache (Redis, shared by
every web process, failing open when Redis is down: see trainer/cache.py). Autosave is never
limited at typing speed: only a mock autosave past RATELIMITS["autosave"] (10 a second, a
script) is refused, and autosave.js sends the text again after Retry-After.
"""

from __future__ import annotations

import ipaddress
import math
import re
import unicodedata
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_ratelimit.core import get_usage

RATE_RE = re.compile(r"^(\d+)/(\d*)([smhd])$")  # the form settings.ratelimit_rates accepts
PERIOD_WORDS = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}


# --- keys -------------------------------------------------------------------------------


def client_ip(group: str, request: HttpRequest) -> str:
    """The client's address (uvicorn puts the proxy's X-Forwarded-For client here when the
    proxy is trusted, see OPERATIONS); IPv6 by /64, as one host usually holds a whole /64."""
    raw = request.META.get("REMOTE_ADDR") or ""
    try:
        address = ipaddress.ip_address(raw)
    except ValueError:
        return "unknown"  # e.g. served over a Unix socket with no proxy header
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/64", strict=False).network_address)
    return str(address)


def fold(text: str) -> str:
    """The form under which look-alike names share one counter: NFKC (what Django applies to
    usernames at sign-up and in the login form, so "ａｄａ" logs in as "ada"), then case-folded
    (which also folds "ADA" and "ß"/"ss"; a wider key only makes the limit stricter)."""
    return unicodedata.normalize("NFKC", text).casefold().strip()


def posted_username(group: str, request: HttpRequest) -> str:
    return fold(request.POST.get("username", "")[:1000])[:150]


def posted_email(group: str, request: HttpRequest) -> str:
    """The address a reset is asked for, folded like Django's own lookup (PasswordResetForm
    matches NFKC + casefold), so one inbox is one counter however it is spelled."""
    return fold(request.POST.get("email", "")[:1000])[:254]


def user_id(group: str, request: HttpRequest) -> str:
    return str(request.user.pk)


# --- checks -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Limited:
    group: str
    limit: int
    period_s: int
    retry_after_s: int

    @property
    def per(self) -> str:
        """'a minute', 'an hour', '30 seconds'."""
        if self.period_s in PERIOD_WORDS:
            word = PERIOD_WORDS[self.period_s]
            return f"an {word}" if word == "hour" else f"a {word}"
        return f"{self.period_s} seconds"

    @property
    def wait(self) -> str:
        """'45 seconds', '1 minute', '12 minutes'."""
        s = max(1, self.retry_after_s)
        if s < 90:
            return f"{s} second{'s' if s != 1 else ''}"
        m = math.ceil(s / 60)
        return f"{m} minute{'s' if m != 1 else ''}"


def _usage(request: HttpRequest, group: str, key, increment: bool) -> dict | None:
    rate = settings.RATELIMITS.get(group)
    if not rate:
        return None
    return get_usage(request, group=group, key=key, rate=rate, increment=increment)


def _limited(group: str, usage: dict) -> Limited:
    _count, _multi, unit = RATE_RE.match(settings.RATELIMITS[group]).groups()
    period = int(_multi or 1) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    # The window ends after second `now + time_left` (whole seconds): +1 is an upper bound.
    return Limited(group, usage["limit"], period, usage["time_left"] + 1)


def hit(request: HttpRequest, group: str, key) -> Limited | None:
    """Count this request; the Limited it exceeds, or None when it may go ahead."""
    usage = _usage(request, group, key, increment=True)
    if usage is None or not usage["should_limit"]:
        return None
    return _limited(group, usage)


def full(request: HttpRequest, group: str, key) -> Limited | None:
    """Whether the budget is already spent, without counting this request (count it with
    hit() once the action succeeded: a refused form does not use up the budget)."""
    usage = _usage(request, group, key, increment=False)
    if usage is None or usage["count"] < usage["limit"]:
        return None
    return _limited(group, usage)


# --- messages and responses ---------------------------------------------------------------


def login_message(limited: Limited) -> str:
    who = "this username" if limited.group == "login-user" else "your network address"
    return (
        f"Too many login attempts for {who} ({limited.limit} in {limited.per} at most). "
        f"Wait {limited.wait}, then try again."
    )


def signup_message(limited: Limited) -> str:
    return (
        f"Too many accounts were created from your network address ({limited.limit} in "
        f"{limited.per} at most). Wait {limited.wait}, then try again."
    )


def answer_message(limited: Limited) -> str:
    return (
        f"You are sending answers faster than anyone can type them ({limited.limit} in "
        f"{limited.per} at most). Your text is kept: wait {limited.wait}, then submit again."
    )


def lab_message(limited: Limited) -> str:
    return (
        f"You have started {limited.limit} lab runs in {limited.per}, the most allowed. "
        f"Your settings are kept: you can start the next run in {limited.wait}."
    )


def password_check_message(limited: Limited) -> str:
    return (
        f"Too many attempts with your current password on this account ({limited.limit} in "
        f"{limited.per} at most, password and email changes together). Wait {limited.wait}, "
        "then try again."
    )


def reset_message(limited: Limited) -> str:
    who = "this email address" if limited.group == "reset-email" else "your network address"
    return (
        f"Too many password-reset requests for {who} ({limited.limit} in {limited.per} at "
        f"most). Wait {limited.wait}, then ask again."
    )


def reset_confirm_message(limited: Limited) -> str:
    return (
        f"Too many password-reset link requests from your network address ({limited.limit} "
        f"in {limited.per} at most). Wait {limited.wait}, then open the link again."
    )


def with_retry_after(response: HttpResponse, limited: Limited) -> HttpResponse:
    response.status_code = 429
    response["Retry-After"] = str(limited.retry_after_s)
    return response


def too_many(
    request: HttpRequest, limited: Limited, message: str, *, kept: str = "", back: str = ""
) -> HttpResponse:
    """429: a fragment for htmx requests (the page swaps it in), else a page with the
    message, the text the learner sent (so it can be copied back) and a way back."""
    context = {"message": message, "kept": kept, "back": back, "limited": limited}
    template = "_rate_limited.html" if getattr(request, "htmx", False) else "429.html"
    return with_retry_after(render(request, template, context), limited)
