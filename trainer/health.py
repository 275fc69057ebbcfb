"""/healthz: is the database up, is Redis up, which Celery workers are listening where.

Every check is a `Probe`: single-flight (at most one of its kind runs at a time, in its own
thread; requests arriving meanwhile wait for that one's result, and may reuse it for
`fresh_s`) and bounded (a request waits at most `timeout_s` for it, then reports it as
timed out). So a flood of probes runs one database query, one Redis PING and one Celery
broadcast at a time (the broadcast at most once per 5 s), whatever the number of requests,
and a store that hangs (a paused Redis, a locked database) holds one thread, not one per
request.

Before (issue 16): 30 concurrent /healthz ran 30 `inspect().active_queues()` broadcasts;
each held one of the Celery app's 10 broker connections while waiting for a producer that
needed another, so they deadlocked for good, and every later task publish in that web
process (a lab start) waited on the same exhausted pool.

Plain `/healthz` is the cheap public answer for load balancers and the container
healthcheck: status and whether the database and Redis answer, nothing else. The details
(errors, timings, the Redis URL without its password, the Celery workers and their queues)
and `?deep=1` (a task sent through a worker and back) are for staff, or for a request with
the header `X-Healthz-Token: <HEALTHZ_TOKEN>`.
"""

from __future__ import annotations

import hmac
import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection

import common.redis

TOKEN_HEADER = "X-Healthz-Token"


class Probe:
    """One check, single-flight and bounded (see the module docstring)."""

    def __init__(self, name: str, check, *, timeout_s: float, fresh_s: float) -> None:
        self.name, self.check = name, check
        self.timeout_s, self.fresh_s = timeout_s, fresh_s
        self._lock = threading.Lock()
        self._value: dict[str, Any] | None = None
        self._at = 0.0
        self._running: Future | None = None

    def request(self) -> dict[str, Any] | Future:
        """A fresh cached result, or the running probe's future (started if none runs)."""
        with self._lock:
            if self._value is not None and time.monotonic() - self._at < self.fresh_s:
                return self._value
            if self._running is None:
                self._running = Future()
                thread = threading.Thread(
                    target=self._run, args=(self._running,), name=f"healthz-{self.name}"
                )
                thread.daemon = True
                thread.start()
            return self._running

    def wait(self, pending: dict[str, Any] | Future) -> dict[str, Any]:
        if isinstance(pending, dict):
            return pending
        try:
            return pending.result(timeout=self.timeout_s)
        except FutureTimeout:
            return {
                "ok": False,
                "timed_out": True,
                "error": f"no answer within {self.timeout_s:g} s (the check is still "
                "running; later requests wait for it instead of starting another)",
            }

    def result(self) -> dict[str, Any]:
        return self.wait(self.request())

    def reset(self) -> None:
        """Forget the cached result (tests); a running probe finishes on its own."""
        with self._lock:
            self._value, self._at = None, 0.0

    def _run(self, future: Future) -> None:
        try:
            value = self.check()
        except Exception as exc:  # a check reports, never raises; this is the last guard
            value = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        with self._lock:
            self._value, self._at, self._running = value, time.monotonic(), None
        future.set_result(value)


# ---------------------------------------------------------------- the checks (probe threads)


def check_database() -> dict[str, Any]:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"; the message says which
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        connection.close()  # this thread's own connection: probe threads do not live on
    return {"ok": True, "vendor": connection.vendor, "ms": _ms_since(started)}


REDIS_TIMEOUT_S = 1.0


def ping_redis(url: str) -> bool:
    return common.redis.ping(url, timeout_s=REDIS_TIMEOUT_S)


def check_redis() -> dict[str, Any]:
    started = time.perf_counter()
    ok = ping_redis(settings.REDIS_URL)
    result: dict[str, Any] = {"ok": ok, "url": _redact(settings.REDIS_URL)}
    if ok:
        result["ms"] = _ms_since(started)
    else:
        result["error"] = f"no PING reply within {REDIS_TIMEOUT_S:g} s"
    return result


INSPECT_TIMEOUT_S = 1.0


def inspect_active_queues() -> dict[str, Any]:
    """One Celery broadcast: {worker name: [queue, ...]} for the workers that answer."""
    return current_app.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}


def check_workers() -> dict[str, Any]:
    """Workers that answer a broadcast, with their queues."""
    try:
        replies = inspect_active_queues()
    except Exception as exc:  # broker down: reported, not raised
        return {"ok": False, "count": 0, "workers": [], "error": f"{type(exc).__name__}: {exc}"}
    workers = [
        {"name": name, "queues": sorted(q["name"] for q in queues)}
        for name, queues in sorted(replies.items())
    ]
    return {"ok": bool(workers), "count": len(workers), "workers": workers}


ROUNDTRIP_TIMEOUT_S = 5.0


def check_roundtrip() -> dict[str, Any]:
    """Send a task through the broker to a worker and back (queue `default`)."""
    from trainer.tasks import diagnostics_roundtrip

    nonce = uuid.uuid4().hex
    started = time.perf_counter()
    try:
        result = diagnostics_roundtrip.apply_async(args=[nonce], retry=False)
        reply = result.get(timeout=ROUNDTRIP_TIMEOUT_S)
    except Exception as exc:  # timeout or broker error: reported, not raised
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    ok = reply.get("nonce") == nonce
    return {"ok": ok, "ms": _ms_since(started), "worker_host": reply.get("host")}


# A request waits a little longer for a probe than the probe's own timeout, so that a store
# that answers "no" in time is reported with its own error rather than as timed out.
# The database and Redis checks are cheap and must say "down" as soon as a store is down (the
# container healthcheck): their result is shared by the requests that waited for it, never
# reused after. The broadcast and the round-trip are reused for 5 s.
DATABASE = Probe("database", check_database, timeout_s=3.0, fresh_s=0.0)
REDIS = Probe("redis", check_redis, timeout_s=REDIS_TIMEOUT_S + 1.0, fresh_s=0.0)
WORKERS = Probe("celery", check_workers, timeout_s=INSPECT_TIMEOUT_S + 2.0, fresh_s=5.0)
ROUNDTRIP = Probe("roundtrip", check_roundtrip, timeout_s=ROUNDTRIP_TIMEOUT_S + 2.0, fresh_s=5.0)
PROBES = (DATABASE, REDIS, WORKERS, ROUNDTRIP)


# ---------------------------------------------------------------- the report


def may_see_details(request) -> bool:
    """Staff, or the right `X-Healthz-Token` header (only when HEALTHZ_TOKEN is set)."""
    token = getattr(settings, "HEALTHZ_TOKEN", "")
    sent = request.headers.get(TOKEN_HEADER, "")
    if token and sent and hmac.compare_digest(sent.encode(), token.encode()):
        return True
    if settings.SESSION_COOKIE_NAME not in request.COOKIES:
        return False  # no session: anonymous, and no database query to find that out
    try:
        user = request.user
        return bool(user.is_authenticated and user.is_staff)
    except Exception:  # the database is down: no details without the token
        return False


def health_report(*, details: bool = True, deep: bool = False) -> tuple[dict[str, Any], int]:
    """The report and its HTTP status: 503 when the database or Redis is down.

    `details=False` is the public answer (status and two booleans). `deep` also round-trips
    a task through a worker (slower; not for load balancers)."""
    pending = [DATABASE.request(), REDIS.request()]
    if details:
        pending.append(WORKERS.request())  # in parallel: the slowest bounds the request
    database, redis_check = DATABASE.wait(pending[0]), REDIS.wait(pending[1])
    healthy = database["ok"] and redis_check["ok"]
    if not details:
        report = {
            "status": "ok" if healthy else "down",
            "database": {"ok": database["ok"]},
            "redis": {"ok": redis_check["ok"]},
        }
        return report, 200 if healthy else 503
    workers = WORKERS.wait(pending[2])
    status = "ok" if healthy and workers["ok"] else ("degraded" if healthy else "down")
    report = {"status": status, "database": database, "redis": redis_check, "celery": workers}
    if deep and healthy and workers["ok"]:
        report["roundtrip"] = ROUNDTRIP.result()
        if not report["roundtrip"]["ok"]:
            report["status"] = "degraded"
    return report, 200 if healthy else 503


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


def _redact(url: str) -> str:
    if "@" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
