"""Settings come from the environment; production mode is strict and `check --deploy` clean."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROD_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": "x7Jq2-production-grade-secret-key-with-enough-entropy-0123456789-abc",
    "ALLOWED_HOSTS": "trainer.example.com",
}
SCRUBBED = {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS"}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    return subprocess.run(
        [sys.executable, "-m", "manage", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_in_production_mode():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PROD_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_mode_requires_a_secret_key():
    env = {**PROD_ENV, "SECRET_KEY": ""}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG=0" in result.stderr


def test_production_mode_requires_allowed_hosts():
    env = {**PROD_ENV, "ALLOWED_HOSTS": ""}
    result = manage("check", env=env)
    assert result.returncode != 0
    assert "ALLOWED_HOSTS must be set" in result.stderr


def test_a_malformed_boolean_is_explained():
    result = manage("check", env={"DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


@pytest.mark.parametrize(
    ("redis_url", "expected"),
    [
        ("unix:///srv/var/redis.sock", "redis+socket:///srv/var/redis.sock"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ],
)
def test_celery_spells_unix_sockets_its_own_way(redis_url, expected):
    from trainer.settings import celery_url

    assert celery_url(redis_url) == expected


def test_celery_is_configured_for_long_jobs(settings):
    from trainer.celery import app

    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_serializer == "json"
    assert app.conf.accept_content == ["json"]
    assert app.conf.broker_transport_options["visibility_timeout"] > settings.LAB_MAX_SECONDS
    assert {q.name for q in app.conf.task_queues} == {"default", "lab-cpu", "lab-gpu"}
    route = app.amqp.router.route({}, "lab.tasks.run_lab_gpu")
    assert route["queue"].name == "lab-gpu"


def test_no_code_turns_off_djangos_async_safety_check():
    """Django's allow-async-unsafe environment flag once hid a 500 in an async view (sync
    ORM on the event loop). Browser tests run their ORM calls in a worker thread (the `orm`
    fixture) instead. (The flag's name is spelt in two halves so this file holds no copy.)"""
    flag = "DJANGO_ALLOW_" + "ASYNC_UNSAFE"
    assert flag not in os.environ
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("tests", "trainer", "lab", "mock", "questions", "bench")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in {".py", ".cfg", ".ini", ".toml", ".sh", ".env"}
        and flag in path.read_text(errors="ignore")
    ]
    offenders += [
        name
        for name in ("pyproject.toml", "Makefile", ".ci/run", ".env.example", "Procfile")
        if (ROOT / name).exists() and flag in (ROOT / name).read_text()
    ]
    assert offenders == []
