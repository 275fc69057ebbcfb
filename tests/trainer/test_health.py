"""/healthz reports the database, Redis and the Celery workers; 503 when a store is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import health

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_worker_cache():
    health._WORKERS_CACHE.update(at=0.0, value=None)
    yield
    health._WORKERS_CACHE.update(at=0.0, value=None)


@pytest.mark.django_db
def test_healthz_reports_database_and_redis(client, redis_url, settings):
    settings.REDIS_URL = redis_url
    response = client.get("/healthz")
    body = response.json()
    assert response.status_code == 200
    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is True
    assert body["status"] in {"ok", "degraded"}  # degraded = no worker listening
    assert response["Cache-Control"].startswith("max-age=0")


@pytest.mark.django_db
def test_healthz_is_503_when_redis_is_down(client, settings, tmp_path):
    settings.REDIS_URL = f"unix://{tmp_path / 'nobody-listens.sock'}"
    response = client.get("/healthz")
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
        "r = Client().get('/healthz');"
        "print(json.dumps({'status': r.status_code, 'body': r.json()}))"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "trainer.settings",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/nothing",
        "REDIS_URL": redis_url,
        "ALLOWED_HOSTS": "testserver",
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
