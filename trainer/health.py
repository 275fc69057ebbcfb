"""/healthz: is the database up, is Redis up, which Celery workers are listening where."""

from __future__ import annotations

import time
import uuid
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connection

from trainer import redis_server

_WORKERS_CACHE: dict[str, Any] = {"at": 0.0, "value": None}
WORKERS_CACHE_S = 5.0


def check_database() -> dict[str, Any]:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any driver error means "down"; the message says which
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "vendor": connection.vendor, "ms": _ms_since(started)}


def check_redis() -> dict[str, Any]:
    started = time.perf_counter()
    ok = redis_server.ping(settings.REDIS_URL, timeout_s=1.0)
    result: dict[str, Any] = {"ok": ok, "url": _redact(settings.REDIS_URL)}
    if ok:
        result["ms"] = _ms_since(started)
    else:
        result["error"] = "no PING reply within 1 s"
    return result


def check_workers(timeout_s: float = 1.0) -> dict[str, Any]:
    """Workers that answer a broadcast, with their queues (cached a few seconds)."""
    now = time.monotonic()
    if _WORKERS_CACHE["value"] is not None and now - _WORKERS_CACHE["at"] < WORKERS_CACHE_S:
        return _WORKERS_CACHE["value"]
    try:
        replies = current_app.control.inspect(timeout=timeout_s).active_queues() or {}
        workers = [
            {"name": name, "queues": sorted(q["name"] for q in queues)}
            for name, queues in sorted(replies.items())
        ]
        value = {"ok": bool(workers), "count": len(workers), "workers": workers}
    except Exception as exc:  # broker down: reported, not raised
        value = {"ok": False, "count": 0, "workers": [], "error": f"{type(exc).__name__}: {exc}"}
    _WORKERS_CACHE.update(at=now, value=value)
    return value


def check_roundtrip(timeout_s: float = 5.0) -> dict[str, Any]:
    """Send a task through the broker to a worker and back (queue `default`)."""
    from trainer.tasks import diagnostics_roundtrip

    nonce = uuid.uuid4().hex
    started = time.perf_counter()
    try:
        reply = diagnostics_roundtrip.delay(nonce).get(timeout=timeout_s)
    except Exception as exc:  # timeout or broker error: reported, not raised
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    ok = reply.get("nonce") == nonce
    return {"ok": ok, "ms": _ms_since(started), "worker_host": reply.get("host")}


def health_report(*, deep: bool = False) -> tuple[dict[str, Any], int]:
    """The report and its HTTP status: 503 when the database or Redis is down.

    `deep` also round-trips a task through a worker (slower; not for load balancers).
    """
    database = check_database()
    redis_check = check_redis()
    workers = check_workers() if redis_check["ok"] else {"ok": False, "count": 0, "workers": []}
    healthy = database["ok"] and redis_check["ok"]
    status = "ok" if healthy and workers["ok"] else ("degraded" if healthy else "down")
    report = {"status": status, "database": database, "redis": redis_check, "celery": workers}
    if deep and healthy and workers["ok"]:
        report["roundtrip"] = check_roundtrip()
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
