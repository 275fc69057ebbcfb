"""The lab end to end with real parts: a Celery worker on real Redis runs the run, uvicorn
serves the SSE stream. Submit → points in DB and stream → done; SSE resume without loss or
duplication; cancel mid-run; a worker that stops heart-beating leaves a failed run."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

import common.redis
from lab import broker, services
from lab.labs import LABS
from lab.labs.base import Chart, Lab, Param, Point, Series
from lab.models import LabRun

pytestmark = [pytest.mark.celery_integration, pytest.mark.django_db(transaction=True)]
TINY_KV = {"tokens": 64, "prompt_tokens": 16, "every": 8, "block_size": 8}


@pytest.fixture
def lab_env(settings, redis_url, live_worker):
    settings.REDIS_URL = redis_url
    return settings


@pytest.fixture
def user():
    return get_user_model().objects.create_user("grace", password="pw-grace-1")


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def status_of(run: LabRun) -> str:
    run.refresh_from_db()
    return run.status


def sse_events(text: str) -> list[tuple[str, str | None, dict]]:
    """Parse a text/event-stream body into (event, id, data) tuples (comments skipped)."""
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "event" in fields:
            out.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
    return out


class Sleepy(Lab):
    """Yields points slowly; with `hang` it stops heart-beating (a stuck or dead worker)."""

    slug = "test-sleepy"
    title = "sleepy"
    summary = "test double for timing"
    topics = ()
    params = (
        Param("n", "n", "int", 3, min=1, max=1000),
        Param("pause", "pause", "float", 0.1, min=0, max=5),
        Param("hang", "hang", "float", 0, min=0, max=10),
    )
    series = (Series("s", "s"),)
    chart = Chart("x", "y")

    def run(self, ctx):
        for i in range(ctx.params["n"]):
            ctx.check_cancel()
            yield Point("s", i, 2 * i)
            if i == 0 and ctx.params["hang"]:
                time.sleep(ctx.params["hang"])  # no heartbeat meanwhile
            time.sleep(ctx.params["pause"])


@pytest.fixture
def sleepy(monkeypatch):
    monkeypatch.setitem(LABS, Sleepy.slug, Sleepy())


def test_a_submitted_run_is_executed_by_the_worker_and_streamed(lab_env, user, live_worker):
    run = services.start_run(user, "kv-cache-growth", TINY_KV)
    assert wait_for(lambda: status_of(run) == "done", what="the run to finish"), run.error
    run.refresh_from_db()
    assert run.worker == live_worker.hostname and run.device.startswith("CPU")
    points = list(run.points.order_by("seq"))
    streamed = [
        data
        for kind, data in (
            broker.decode_entry(f)
            for _, f in common.redis.client().xrange(broker.stream_key(run.pk))
        )
        if kind == "point"
    ]
    assert streamed == [services.point_payload(p) for p in points] and len(points) >= 14
    assert all(p.y == p.extra["predicted"] for p in points if p.series in ("mha", "gqa"))


def test_sse_resumes_after_the_last_seq_without_loss_or_duplicates(
    lab_env, user, asgi_server, sleepy
):
    run = services.start_run(user, Sleepy.slug, {"n": 12, "pause": 0.15})
    client = Client()
    client.force_login(user)
    cookies = {"sessionid": client.cookies["sessionid"].value}
    url = f"{asgi_server}/lab/runs/{run.pk}/events"
    seen: list[int] = []
    with httpx.Client(cookies=cookies, timeout=30) as http:
        # First connection: read a few points live, then drop it mid-run.
        with http.stream("GET", url, params={"last_id": -1}) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            assert resp.headers["cache-control"] == "no-cache"
            buffer = ""
            for chunk in resp.iter_text():
                buffer += chunk
                points = [e for e in sse_events(buffer.rsplit("\n\n", 1)[0]) if e[0] == "point"]
                if len(points) >= 3:
                    break
        seen += [int(i) for _, i, _ in points]
        assert status_of(run) == "running", "the run should still be going after 3 points"
        # Reconnect as EventSource does: Last-Event-ID is the last id received.
        resp = http.get(url, headers={"Last-Event-ID": str(seen[-1])})
    events = sse_events(resp.text)
    assert events[-1][0] == "end" and events[-1][2]["status"] == "done"
    seen += [int(i) for kind, i, _ in events if kind == "point"]
    assert seen == list(range(12))  # every point once, in order
    assert [d["y"] for kind, _, d in events if kind == "point"] == [2 * i for i in seen[3:]]
    # A finished run replays from the DB after ?last_id=.
    with httpx.Client(cookies=cookies, timeout=30) as http:
        replay = sse_events(http.get(url, params={"last_id": 9}).text)
    assert [int(i) for kind, i, _ in replay if kind == "point"] == [10, 11]


def test_sse_refuses_other_users_and_anonymous(lab_env, user, asgi_server):
    run = LabRun.objects.create(owner=user, lab="kv-cache-growth")
    other = get_user_model().objects.create_user("mallory", password="x")
    client = Client()
    client.force_login(other)
    url = f"{asgi_server}/lab/runs/{run.pk}/events"
    assert httpx.get(url, timeout=10).status_code == 403
    cookies = {"sessionid": client.cookies["sessionid"].value}
    assert httpx.get(url, cookies=cookies, timeout=10).status_code == 404


def test_an_operator_with_view_labrun_watches_a_learners_run(lab_env, user, asgi_server):
    """Under uvicorn with Django's async-safety check on (no test sets the flag): the
    permission check of the async SSE view must not run sync ORM on the event loop."""
    from django.contrib.auth.models import Permission

    run = LabRun.objects.create(owner=user, lab="kv-cache-growth", status="done")
    run.points.create(seq=0, series="mha", x=1.0, y=2.0)
    operator = get_user_model().objects.create_user("ops", password="x")
    operator.user_permissions.add(Permission.objects.get(codename="view_labrun"))
    client = Client()
    client.force_login(operator)
    cookies = {"sessionid": client.cookies["sessionid"].value}
    reply = httpx.get(f"{asgi_server}/lab/runs/{run.pk}/events", cookies=cookies, timeout=10)
    assert reply.status_code == 200
    events = sse_events(reply.text)
    assert [(kind, i) for kind, i, _ in events if kind == "point"] == [("point", "0")]
    assert events[-1][0] == "end" and events[-1][2]["status"] == "done"


def test_cancel_mid_run_stops_at_the_next_point_and_keeps_the_rest(lab_env, user, sleepy):
    run = services.start_run(user, Sleepy.slug, {"n": 500, "pause": 0.05})
    wait_for(lambda: run.points.count() >= 3, what="three points")
    client = Client()
    client.force_login(user)
    reply = client.post(f"/lab/runs/{run.pk}/cancel", HTTP_ACCEPT="application/json")
    assert reply.status_code == 200 and reply.json()["status"] in ("running", "cancelled")
    wait_for(lambda: status_of(run) == "cancelled", timeout=10, what="cancelled")
    kept = run.points.count()
    assert 3 <= kept < 500
    time.sleep(0.3)
    assert run.points.count() == kept  # nothing after the cancel landed


def test_a_worker_that_stops_heartbeating_leaves_a_failed_run_with_its_points(
    lab_env, user, sleepy
):
    lab_env.LAB_STALE_SECONDS = 1
    run = services.start_run(user, Sleepy.slug, {"n": 3, "pause": 0, "hang": 3})
    wait_for(lambda: run.points.count() == 1, what="the first point")
    time.sleep(1.5)
    client = Client()
    client.force_login(user)
    page = client.get(f"/lab/runs/{run.pk}/")  # any lab page reaps stale runs
    assert page.status_code == 200
    run.refresh_from_db()
    assert run.status == "failed" and "stopped reporting" in run.error
    assert run.points.count() == 1
    # When the stuck worker wakes up it must not resurrect the run (nor add points).
    time.sleep(2.5)
    assert status_of(run) == "failed" and run.points.count() == 1
