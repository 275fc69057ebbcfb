"""/healthz reports the database, Redis and the Celery workers; 503 when a store is down.
Plain /healthz is public and cheap (status and two booleans); the details and ?deep=1 are
for staff or the X-Healthz-Token header. Every check is single-flight and bounded."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from trainer import health

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "health-probe-token"


@pytest.fixture(autouse=True)
def _fresh_probes():
    for probe in getattr(health, "PROBES", ()):
        probe.reset()
    yield
    for probe in getattr(health, "PROBES", ()):
        probe.reset()


@pytest.mark.django_db
def test_healthz_reports_database_and_redis(client, redis_url, settings):
    settings.REDIS_URL = redis_url
    settings.HEALTHZ_TOKEN = TOKEN
    response = client.get("/healthz", headers={"X-Healthz-Token": TOKEN})
    body = response.json()
    assert response.status_code == 200
    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is True
    assert body["status"] in {"ok", "degraded"}  # degraded = no worker listening
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db
def test_public_healthz_says_up_or_down_and_nothing_else(client, redis_url, settings):
    settings.REDIS_URL = redis_url
    settings.HEALTHZ_TOKEN = TOKEN
    for headers in ({}, {"X-Healthz-Token": "wrong"}):
        response = client.get("/healthz", headers=headers)
        assert response.status_code == 200
        assert response.json() == {"status": "ok", "database": {"ok": True}, "redis": {"ok": True}}
    response = client.get("/healthz?deep=1")
    assert response.status_code == 403
    assert "X-Healthz-Token" in response.json()["error"] and "staff" in response.json()["error"]
    settings.HEALTHZ_TOKEN = ""  # no token configured: an empty header is no key
    assert "celery" not in client.get("/healthz", headers={"X-Healthz-Token": ""}).json()


@pytest.mark.django_db
def test_staff_see_the_details(client, redis_url, settings, django_user_model):
    settings.REDIS_URL = redis_url
    learner = django_user_model.objects.create_user("lee", password="pw-lee-123456")
    client.force_login(learner)
    assert "celery" not in client.get("/healthz").json()
    staff = django_user_model.objects.create_user("sam", password="pw-sam-123456", is_staff=True)
    client.force_login(staff)
    body = client.get("/healthz").json()
    assert {"database", "redis", "celery"} <= set(body) and "ms" in body["redis"]


@pytest.mark.django_db
def test_healthz_is_503_when_redis_is_down(client, settings, tmp_path):
    settings.REDIS_URL = f"unix://{tmp_path / 'nobody-listens.sock'}"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "down", "database": {"ok": True}, "redis": {"ok": False}}
    settings.HEALTHZ_TOKEN = TOKEN
    response = client.get("/healthz", headers={"X-Healthz-Token": TOKEN})
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down"
    assert body["redis"]["ok"] is False
    assert body["database"]["ok"] is True


def test_healthz_is_503_when_the_database_is_down(redis_url):
    # A real unreachable database in a separate process (nothing listens on port 1).
    code = (
        "import django, json; django.setup();"
        "from django.test import Client;"
        "r = Client().get('/healthz', headers={'X-Healthz-Token': 'db-down-token'});"
        "print(json.dumps({'status': r.status_code, 'body': r.json()}))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "trainer.settings",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing",
        "REDIS_URL": redis_url,
        "ALLOWED_HOSTS": "testserver",
        "HEALTHZ_TOKEN": "db-down-token",
    }
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["status"] == 503
    assert outcome["body"]["database"]["ok"] is False
    assert "OperationalError" in outcome["body"]["database"]["error"]
    assert outcome["body"]["redis"]["ok"] is True


def test_credentials_in_the_redis_url_are_not_shown():
    assert health._redact("redis://user:s3cret@cache:6379/0") == "redis://***@cache:6379/0"


class Concurrency:
    """Wraps a real function: counts calls and the most that ran at the same time. It holds
    each call a moment (0.2 s) so that probes arriving together really overlap; nothing here
    measures or asserts time."""

    def __init__(self, real) -> None:
        self.real, self.calls, self.now, self.most = real, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self.lock:
            self.calls += 1
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            time.sleep(0.2)
            return self.real(*args, **kwargs)
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.celery_integration
@pytest.mark.django_db(transaction=True)
def test_30_concurrent_probes_run_one_check_at_a_time_and_the_site_keeps_answering(
    asgi_server, live_worker, settings, redis_url, monkeypatch
):
    """Issue 16, finding 2. Before: the 30 probes ran 30 Celery broadcasts at once, which
    deadlocked on the app's broker connection pool; none of them, nor any later /healthz,
    ever answered (the web process's task publishing was stuck with them)."""
    from celery.app.control import Inspect

    import common.redis

    settings.REDIS_URL = redis_url
    settings.HEALTHZ_TOKEN = TOKEN
    pings = Concurrency(common.redis.ping)
    broadcasts = Concurrency(Inspect.active_queues)
    monkeypatch.setattr(common.redis, "ping", pings)
    monkeypatch.setattr(Inspect, "active_queues", lambda self, *a, **kw: broadcasts(self, *a, **kw))

    def probe(_):
        # The timeout only turns a hang into a failure; nothing here measures time.
        r = httpx.get(f"{asgi_server}/healthz", headers={"X-Healthz-Token": TOKEN}, timeout=60)
        return r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(30) as pool:
        probes = [pool.submit(probe, i) for i in range(30)]
        # While they run: a page, and a public probe, are answered.
        page = httpx.get(f"{asgi_server}/accounts/login/", timeout=60)
        public = httpx.get(f"{asgi_server}/healthz", timeout=60)
        answers = [p.result() for p in probes]
    assert page.status_code == 200 and "Log in" in page.text
    assert public.status_code == 200 and public.json()["status"] == "ok"
    assert public.json() == {"status": "ok", "database": {"ok": True}, "redis": {"ok": True}}
    for status, body in answers:
        assert status == 200, body
        names = [w["name"] for w in body["celery"]["workers"]]
        assert live_worker.hostname in names, body
    assert broadcasts.calls >= 1 and broadcasts.most == 1, vars(broadcasts)
    assert pings.calls >= 1 and pings.most == 1, vars(pings)
    # Far fewer checks than requests: the others waited for one and reused its result.
    assert broadcasts.calls < 30
    # And later probes still answer (nothing is left stuck).
    health.WORKERS.reset()
    again = httpx.get(f"{asgi_server}/healthz", headers={"X-Healthz-Token": TOKEN}, timeout=60)
    assert again.status_code == 200 and again.json()["celery"]["ok"] is True
