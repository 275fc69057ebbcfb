"""Lab runs through the service layer, in this process, on the real DB and real Redis:
validation, the per-user limit, execute (points saved and streamed, exact KV bytes),
failures that keep their points, cancel while queued, and reaping a dead worker's run."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

import common.redis
from lab import broker, runner, services
from lab.labs import LABS, LabParamError
from lab.labs.base import Chart, Lab, Param, Point, Series
from lab.models import LabPoint, LabRun

pytestmark = pytest.mark.django_db
TINY_KV = {"tokens": 48, "prompt_tokens": 20, "every": 8, "block_size": 8}


@pytest.fixture
def user():
    return get_user_model().objects.create_user("grace", password="x")


@pytest.fixture
def redis_settings(settings, redis_url):
    settings.REDIS_URL = redis_url
    return settings


class Failing(Lab):
    slug = "test-failing"
    title = "fails after two points"
    summary = "test double"
    topics = ()
    params = (Param("n", "n", "int", 2, min=0, max=5),)
    series = (Series("s", "s"),)
    chart = Chart("x", "y")

    def run(self, ctx):
        for i in range(ctx.params["n"]):
            yield Point("s", i, i * i)
        raise RuntimeError("the engine ran out of blocks at step 3")


class Calibrated(Lab):
    slug = "test-calibrated"
    title = "sets its constants, then measures"
    summary = "test double"
    topics = ()
    params = ()
    series = (Series("s", "s"),)
    chart = Chart("x", "y")

    def run(self, ctx):
        ctx.summary["constants"] = "fp32 on a test CPU: read 9.9 GB/s"
        ctx.summary["warmup"] = "discarded: one call"
        yield Point("s", 0, 1.0)
        ctx.summary["ratio"] = 0.5  # not live: only in the final summary
        yield Point("s", 1, 2.0)


def test_the_constants_are_sent_with_the_first_point_not_only_at_the_end(
    user, redis_settings, monkeypatch
):
    monkeypatch.setitem(LABS, Calibrated.slug, Calibrated())
    run = services.start_run(user, Calibrated.slug, {})
    assert runner.execute_run(run.pk, "w") == LabRun.Status.DONE
    entries = [
        broker.decode_entry(f) for _, f in common.redis.client().xrange(broker.stream_key(run.pk))
    ]
    kinds = [kind for kind, _ in entries]
    first_point = kinds.index("point")
    live = entries[first_point + 1]  # right after the point that came with them
    assert live[0] == "status" and live[1]["status"] == LabRun.Status.RUNNING
    assert live[1]["constants"] == "fp32 on a test CPU: read 9.9 GB/s"
    assert ["warmup", "discarded: one call"] in live[1]["summary_rows"]
    # sent once: the second point changed no live line
    assert kinds[first_point + 2 :].count("status") == 1  # the final one
    assert entries[-1][1]["summary"]["ratio"] == 0.5
    assert entries[-1][1]["constants"] == live[1]["constants"]


def test_bad_params_are_refused_with_every_reason(user):
    with pytest.raises(LabParamError) as err:
        services.start_run(user, "kv-cache-growth", {"tokens": 9999, "dtype": "int3", "x": 1})
    assert err.value.errors["tokens"] == "must be at most 512 tokens, not 9999"
    assert "fp32, bf16, fp16" in err.value.errors["dtype"]
    assert err.value.errors["x"] == "is not a parameter of this lab"
    with pytest.raises(LabParamError, match="prompt_tokens: must be smaller"):
        services.start_run(user, "kv-cache-growth", {"tokens": 64, "prompt_tokens": 64})
    with pytest.raises(KeyError, match="No lab 'nope'"):
        services.start_run(user, "nope", {})
    assert not LabRun.objects.exists()


def test_a_user_may_have_two_active_runs_then_gets_a_clear_refusal(user, redis_settings):
    redis_settings.LAB_MAX_ACTIVE_RUNS = 2
    first = services.start_run(user, "kv-cache-growth", {})
    second = services.start_run(user, "kv-cache-growth", {"dtype": "bf16"})
    assert first.queue == second.queue == "lab-cpu" and first.task_id != second.task_id
    with pytest.raises(services.RunRefused, match=rf"#{first.pk}.*the limit is 2"):
        services.start_run(user, "kv-cache-growth", {})
    services.cancel_run(first)
    assert services.start_run(user, "kv-cache-growth", {}).status == LabRun.Status.QUEUED


def test_execute_saves_streams_and_measures_kv_bytes_exactly(user, redis_settings):
    run = services.start_run(user, "kv-cache-growth", TINY_KV)
    status = runner.execute_run(run.pk, "worker-a")
    run.refresh_from_db()
    assert status == run.status == LabRun.Status.DONE, run.error
    assert run.worker == "worker-a" and run.device.startswith("CPU")
    points = list(run.points.order_by("seq"))
    assert [p.seq for p in points] == list(range(len(points))) and len(points) >= 12
    measured = [p for p in points if p.series in ("mha", "gqa")]
    assert all(p.y == p.extra["predicted"] for p in measured)
    assert {p.x for p in measured} >= {8, 48}
    assert run.summary["points"] == len(points) and run.summary["wall_s"] > 0
    # Same points, same order, in the stream; then the final status.
    entries = [
        broker.decode_entry(f) for _, f in common.redis.client().xrange(broker.stream_key(run.pk))
    ]
    streamed = [d for kind, d in entries if kind == "point"]
    assert streamed == [services.point_payload(p) for p in points]
    assert entries[-1] == ("status", services.status_payload(run))


def test_a_failing_lab_keeps_its_points_and_a_readable_error(user, redis_settings, monkeypatch):
    monkeypatch.setitem(LABS, Failing.slug, Failing())
    run = services.start_run(user, Failing.slug, {"n": 2})
    assert runner.execute_run(run.pk, "w") == LabRun.Status.FAILED
    run.refresh_from_db()
    assert run.error == "RuntimeError: the engine ran out of blocks at step 3"
    assert list(run.points.values_list("y", flat=True)) == [0.0, 1.0]
    assert run.finished is not None


def test_cancel_while_queued_means_the_worker_never_starts_it(user, redis_settings):
    run = services.start_run(user, "kv-cache-growth", TINY_KV)
    services.cancel_run(run)
    assert runner.execute_run(run.pk, "w") == LabRun.Status.CANCELLED
    run.refresh_from_db()
    assert run.started is None and not run.points.exists() and run.cancel_requested


def test_a_run_whose_worker_stopped_heartbeating_is_failed_with_its_points(user, redis_settings):
    run = LabRun.objects.create(
        owner=user,
        lab="kv-cache-growth",
        status="running",
        worker="gpu-node-3",
        heartbeat=timezone.now(),
    )
    LabPoint.objects.create(run=run, seq=0, series="gqa", x=1, y=2)
    assert services.reap_stale_runs() == 0  # alive
    LabRun.objects.filter(pk=run.pk).update(heartbeat=timezone.now() - timedelta(seconds=61))
    assert services.reap_stale_runs() == 1
    run.refresh_from_db()
    assert run.status == LabRun.Status.FAILED and run.points.count() == 1
    assert (
        "gpu-node-3 stopped reporting" in run.error and "1 points it recorded are kept" in run.error
    )
    # A late finish from the worker does not overwrite the verdict.
    assert runner._finish(run.pk, LabRun.Status.DONE, "", {}) == LabRun.Status.FAILED


def test_a_gpu_run_is_refused_when_no_worker_serves_lab_gpu(user, redis_settings):
    started = time.monotonic()
    with pytest.raises(services.RunRefused, match="No worker serves the lab-gpu queue"):
        services.start_run(user, "kv-cache-growth", {}, gpu=True)
    assert time.monotonic() - started < 5
