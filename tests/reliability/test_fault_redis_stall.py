"""Redis stalls instead of dying (issue 16): it is paused (SIGSTOP) or stops taking writes
(CLIENT PAUSE WRITE) while its connections stay open, so nothing is refused and a client
without a socket timeout waits forever. Real processes: our own `redis-server`, `uvicorn
trainer.asgi:application` and, to see what becomes of a late message, `celery -A trainer
worker`, on the test database.

- A lab start whose PING was answered but whose message the broker does not take: a 503
  "the lab queue is unavailable … nothing was recorded" within a bounded time (the broker's
  socket timeout), no LabRun row. Before: the request hung while Redis was paused (~45 s in
  the probe, with the run already in the database).
- /healthz while Redis stalls: every probe answers, the stalled checks reported as timed out
  (or as the driver's timeout), and the site keeps answering. Before: each probe hung."""

from __future__ import annotations

import concurrent.futures
import contextlib
import signal
import threading
import time

import httpx
import pytest
import redis
from django.contrib.auth import get_user_model
from procs import Procs, RedisServer, free_port, wait_for

from lab.models import LabRun

pytestmark = [pytest.mark.celery_integration, pytest.mark.django_db(transaction=True)]

PASSWORD = "redis-stalls-not-dies"
LAB = "kv-cache-growth"
TINY_KV = {"tokens": "32", "prompt_tokens": "16", "every": "8", "block_size": "8"}
TOKEN = "stall-token"
# A hang breaker for the test's own HTTP calls, not a measured limit: the fixed site answers
# within the broker's socket timeout (5 s) plus the PING's (2 s).
HANG_S = 40.0


def log_in(base: str) -> httpx.Client:
    http = httpx.Client(base_url=base, timeout=HANG_S, follow_redirects=False)
    http.get("/accounts/login/")
    response = http.post(
        "/accounts/login/",
        data={"username": "ada", "password": PASSWORD},
        headers={"X-CSRFToken": http.cookies["csrftoken"]},
    )
    assert response.status_code == 302, response.text[:500]
    return http


def wait_for_command(url: str, command: str, started: threading.Event) -> threading.Event:
    """Set the returned event once Redis has executed `command` (MONITOR)."""
    seen = threading.Event()

    def watch() -> None:
        client = redis.Redis.from_url(url, socket_timeout=HANG_S)
        with contextlib.suppress(redis.RedisError), client.monitor() as monitor:
            started.set()
            while True:
                entry = monitor.next_command()
                if entry["command"].split()[0].upper() == command:
                    seen.set()
                    return

    threading.Thread(target=watch, daemon=True).start()
    return seen


def test_a_lab_start_whose_message_redis_does_not_take_is_a_503_and_leaves_no_run(tmp_path):
    get_user_model().objects.create_user("ada", password=PASSWORD)
    server = RedisServer(log_dir=tmp_path).start()
    admin = redis.Redis.from_url(server.url, socket_timeout=10)
    try:
        with Procs(server.url) as procs:
            web = procs.web(free_port())
            http = log_in(web.info["url"])
            # Writes stall from here (PING is still answered); once the web's PING has been
            # answered, Redis is paused outright: the message can only be sent into a socket
            # nobody reads.
            started = threading.Event()
            pinged = wait_for_command(server.url, "PING", started)
            assert started.wait(10)
            admin.client_pause(120_000, all=False)
            outcome: dict = {}

            def start_lab() -> None:
                t0 = time.monotonic()
                try:
                    outcome["response"] = http.post(
                        f"/lab/{LAB}/",
                        data=TINY_KV,
                        headers={"X-CSRFToken": http.cookies["csrftoken"]},
                    )
                except httpx.HTTPError as exc:
                    outcome["error"] = exc
                outcome["seconds"] = time.monotonic() - t0

            request = threading.Thread(target=start_lab)
            request.start()
            assert pinged.wait(HANG_S), "the lab start never PINGed Redis"
            server.popen.send_signal(signal.SIGSTOP)
            request.join(HANG_S + 5)
            assert "error" not in outcome, f"the lab start did not answer: {outcome['error']!r}"
            response = outcome["response"]
            print(f"\nlab start answered {response.status_code} after {outcome['seconds']:.1f} s")
            assert response.status_code == 503, response.text[:2000]
            assert "The lab queue is unavailable" in response.text
            assert "nothing was recorded" in response.text
            assert 'value="32"' in response.text  # the typed parameters are kept
            assert not LabRun.objects.exists()

            # Redis resumes: the command already in its socket runs now, so the message does
            # reach the queue. Its run is gone, so the worker that takes it does nothing.
            server.popen.send_signal(signal.SIGCONT)
            admin.client_unpause()
            queued = wait_for(lambda: admin.llen("lab-cpu"), 20, "the late message in lab-cpu")
            assert queued == 1
            worker = procs.worker("stall", queues="lab-cpu")
            wait_for(lambda: admin.llen("lab-cpu") == 0, 60, "the worker to take the message")
            wait_for(lambda: "succeeded" in worker.output(100_000), 60, "the task to finish")
            assert "'stale'" in worker.output(100_000)
            assert not LabRun.objects.exists()
            # And the queue is usable again: a new start is accepted.
            response = http.post(
                f"/lab/{LAB}/", data=TINY_KV, headers={"X-CSRFToken": http.cookies["csrftoken"]}
            )
            assert response.status_code == 302, response.text[:2000]
            assert LabRun.objects.count() == 1
    finally:
        with contextlib.suppress(ProcessLookupError, AttributeError):
            server.popen.send_signal(signal.SIGCONT)
        server.kill()


def test_healthz_answers_while_redis_stalls_and_reports_the_stalled_checks(tmp_path):
    server = RedisServer(log_dir=tmp_path).start()
    admin = redis.Redis.from_url(server.url, socket_timeout=10)
    try:
        with Procs(server.url, HEALTHZ_TOKEN=TOKEN) as procs:
            web = procs.web(free_port())
            base = web.info["url"]
            token = {"X-Healthz-Token": TOKEN}
            # Redis answers PING but takes no write: the Celery broadcast cannot be sent.
            admin.client_pause(120_000, all=False)

            def probe(_):
                r = httpx.get(f"{base}/healthz", headers=token, timeout=HANG_S)
                return r.status_code, r.json()

            with concurrent.futures.ThreadPoolExecutor(30) as pool:
                probes = [pool.submit(probe, i) for i in range(30)]
                page = httpx.get(f"{base}/accounts/login/", timeout=HANG_S)
                public = httpx.get(f"{base}/healthz", timeout=HANG_S)
                answers = [p.result() for p in probes]
            assert page.status_code == 200
            assert public.status_code == 200 and public.json()["status"] == "ok"
            for status, body in answers:
                assert status == 200 and body["status"] == "degraded", body
                assert body["redis"]["ok"] is True and body["celery"]["ok"] is False
                celery = body["celery"]
                assert celery.get("timed_out") or "Timeout" in celery.get("error", ""), celery
            assert any(body["celery"].get("timed_out") for _, body in answers)
            timed_out = next(b["celery"] for _, b in answers if b["celery"].get("timed_out"))
            assert "no answer within 3 s" in timed_out["error"]

            # Paused outright: PING gets no reply either; reported within its timeout.
            server.popen.send_signal(signal.SIGSTOP)

            def redis_reported_down():
                r = httpx.get(f"{base}/healthz", headers=token, timeout=HANG_S)
                return r.status_code == 503 and r.json()

            body = wait_for(redis_reported_down, 60, "/healthz 503 with Redis paused")
            assert body["status"] == "down" and body["database"]["ok"] is True
            assert body["redis"]["ok"] is False and body["redis"]["error"]
            public = httpx.get(f"{base}/healthz", timeout=HANG_S)
            assert public.status_code == 503
            assert public.json() == {
                "status": "down",
                "database": {"ok": True},
                "redis": {"ok": False},
            }

            # Resumed: the stalled checks finish, fresh ones run, the report is whole again.
            server.popen.send_signal(signal.SIGCONT)
            admin.client_unpause()

            def recovered():
                r = httpx.get(f"{base}/healthz", headers=token, timeout=HANG_S)
                body = r.json()
                celery = body.get("celery", {})
                fine = r.status_code == 200 and not celery.get("timed_out")
                return fine and "error" not in celery and body

            body = wait_for(recovered, 60, "/healthz to recover")
            assert body["redis"]["ok"] is True and body["celery"]["count"] == 0  # no worker
    finally:
        with contextlib.suppress(ProcessLookupError, AttributeError):
            server.popen.send_signal(signal.SIGCONT)
        server.kill()
