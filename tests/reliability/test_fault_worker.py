"""A Celery worker killed with SIGKILL in the middle of a lab run (real processes: `celery -A
trainer worker` on the test's Redis and database).

Policy (docs/OPERATIONS.md, "Long jobs"): the killed run ends `failed` with its points kept
and is not re-run; a run queued behind it waits in Redis and is taken by the next worker;
the killed run's message, delivered again once the broker's visibility timeout passes,
finds the run no longer `queued` and changes nothing."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import timedelta

import pytest
import redis
from celery.result import AsyncResult
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone
from procs import Procs, QueueToOurselves

from lab import runner, services
from lab.models import LabRun

pytestmark = [pytest.mark.celery_integration, pytest.mark.django_db(transaction=True)]

# Long enough to be killed mid-run (hundreds of points), short enough to finish if not.
LONG_KV = {"tokens": 512, "prompt_tokens": 16, "every": 1, "block_size": 8}
TINY_KV = {"tokens": 64, "prompt_tokens": 16, "every": 8, "block_size": 8}
STALE_S = 2


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def embedded(html: str) -> dict:
    """The run page's data island (what lab_run.js draws)."""
    match = re.search(r'<script id="lab-run-data" type="application/json">(.*?)</script>', html)
    assert match, "the run page has no lab-run-data"
    return json.loads(match.group(1))


def broker_task_ids(redis_url: str) -> tuple[set[str], set[str]]:
    """Task ids waiting in the lab-cpu list, and those delivered but not yet acknowledged."""
    client = redis.Redis.from_url(redis_url)
    queued = {json.loads(m)["headers"]["id"] for m in client.lrange("lab-cpu", 0, -1)}
    unacked = {json.loads(v)[0]["headers"]["id"] for v in client.hgetall("unacked").values()}
    return queued, unacked


def delivered_at(redis_url: str, task_id: str) -> float:
    """When kombu delivered the (unacknowledged) message of `task_id` to a worker."""
    client = redis.Redis.from_url(redis_url)
    for tag, value in client.hgetall("unacked").items():
        if json.loads(value)[0]["headers"]["id"] == task_id:
            return client.zscore("unacked_index", tag)
    raise AssertionError(f"no unacknowledged message for {task_id}")


def fresh(run: LabRun) -> LabRun:
    run.refresh_from_db()
    return run


def test_a_worker_killed_mid_run_fails_the_run_keeps_its_points_and_the_next_worker_goes_on(
    settings, redis_url
):
    user = get_user_model().objects.create_user("kim", password="pw-kim-12345")
    client = Client()
    client.force_login(user)
    with QueueToOurselves("lab-cpu"), Procs(redis_url) as procs:
        first = procs.worker("lab-a")

        # 1. Only the pool process dies (as when the OOM killer picks it); the worker's main
        # process sees it at once, fails the run, and forks a new pool process.
        oom = services.start_run(user, "kv-cache-growth", LONG_KV)
        wait_for(lambda: oom.points.count() >= 5, what="points from the first run")
        pool = [pid for pid in first.group_pids() if pid != first.pid]
        assert len(pool) == 1, pool  # concurrency 1: one pool process, running this run
        os.kill(pool[0], signal.SIGKILL)
        wait_for(lambda: fresh(oom).status == "failed", timeout=30, what="the run to fail")
        oom_kept = oom.points.count()
        assert "died (Worker exited prematurely: signal 9 (SIGKILL)" in oom.error, oom.error
        assert f"The {oom_kept} points it recorded are kept" in oom.error
        assert "not re-run" in oom.error and first.info["node"] in oom.error
        assert [p.seq for p in oom.points.order_by("seq")] == list(range(oom_kept))

        # 2. The whole worker (main process and pool) is SIGKILLed mid-run.
        killed = services.start_run(user, "kv-cache-growth", LONG_KV)
        wait_for(lambda: killed.points.count() >= 20, what="points from the first worker")
        waiting = services.start_run(user, "kv-cache-growth", TINY_KV)
        # Prefetch 1 + late ack: the busy worker has not taken it; it waits in the queue.
        time.sleep(0.5)
        queued, unacked = broker_task_ids(redis_url)
        assert waiting.task_id in queued and waiting.task_id not in unacked
        assert killed.task_id in unacked
        assert fresh(waiting).status == "queued"
        assert fresh(killed).status == "running"

        assert killed.worker == first.info["node"]  # the same worker, a new pool process
        first.kill()  # the whole process group: main process and the pool child
        assert not first.group_pids()
        kept = killed.points.count()
        assert kept >= 20 and fresh(killed).status == "running"  # nobody has noticed yet

        # The reaper (run by any lab page, the SSE loop, start_run) fails it once its
        # heartbeat is older than LAB_STALE_SECONDS.
        settings.LAB_STALE_SECONDS = STALE_S
        stale = timedelta(seconds=STALE_S + 0.1)
        wait_for(lambda: timezone.now() - fresh(killed).heartbeat > stale, what="stale")
        page = client.get(f"/lab/runs/{killed.pk}/")
        assert page.status_code == 200
        killed = fresh(killed)
        assert killed.status == "failed", killed.status
        assert "stopped reporting" in killed.error and first.info["node"] in killed.error
        assert f"The {kept} points it recorded are kept. It is not re-run" in killed.error
        assert killed.error in page.content.decode()  # the learner reads why
        data = embedded(page.content.decode())
        assert [p["seq"] for p in data["points"]] == list(range(kept))  # all of them, once
        assert killed.points.count() == kept
        verdict = (killed.status, killed.error, killed.finished)
        assert fresh(waiting).status == "queued"  # no worker: it waits, it is not lost

        # A new worker process. Its visibility timeout (4 x LAB_MAX_SECONDS = 4 s) is below
        # the killed message's age, so at start it puts that unacknowledged message back:
        # the killed run is delivered again, alongside the queued one.
        visibility_s = 4 * 1
        wait_for(
            lambda: time.time() - delivered_at(redis_url, killed.task_id) > visibility_s + 0.5,
            what="the killed message to be older than the visibility timeout",
        )
        second = procs.worker("lab-b", LAB_MAX_SECONDS="1")
        wait_for(lambda: fresh(waiting).status == "done", timeout=60, what="the queued run")
        assert waiting.worker == second.info["node"] and waiting.error == ""
        assert waiting.points.count() >= 14
        redelivered = AsyncResult(killed.task_id)
        assert redelivered.get(timeout=30) == "failed"  # the task ran again ... and refused
        assert killed.task_id not in broker_task_ids(redis_url)[1]  # acknowledged this time
        killed = fresh(killed)
        assert (killed.status, killed.error, killed.finished) == verdict
        assert [p.seq for p in killed.points.order_by("seq")] == list(range(kept))
        assert fresh(oom).status == "failed" and oom.points.count() == oom_kept
        assert "ready." in second.output(100_000) and second.alive()


def test_a_message_delivered_again_never_reruns_or_rewrites_a_run(redis_url):
    """The guards behind the policy, for every state a redelivered message can find (the
    process test above covers `failed` end to end): only a `queued` run whose task id is the
    message's is executed; a dead process fails only the run its message owns."""
    user = get_user_model().objects.create_user("lee", password="pw-lee-12345")
    for status in ("running", "failed", "done", "cancelled"):
        run = LabRun.objects.create(
            owner=user, lab="kv-cache-growth", params=TINY_KV, status=status, task_id=f"t-{status}"
        )
        run.points.create(seq=0, series="mha", x=1, y=2)
        before = LabRun.objects.filter(pk=run.pk).values().get()
        assert runner.execute_run(run.pk, "lab@elsewhere", task_id=run.task_id) == status
        assert LabRun.objects.filter(pk=run.pk).values().get() == before
        assert run.points.count() == 1
    queued = LabRun.objects.create(owner=user, lab="kv-cache-growth", task_id="mine")
    assert runner.execute_run(queued.pk, "lab@x", task_id="a-stale-message") == "stale"
    assert not runner.fail_lost_run(queued.pk, "a-stale-message", "It died.")
    assert fresh(queued).status == "queued" and not queued.points.exists()
    done = LabRun.objects.get(task_id="t-done")
    assert not runner.fail_lost_run(done.pk, "t-done", "It died.")
    assert fresh(done).status == "done"
    assert runner.fail_lost_run(queued.pk, "mine", "It died.")
    assert fresh(queued).status == "failed"
    assert queued.error == "It died. The 0 points it recorded are kept. " + services.NOT_RERUN
