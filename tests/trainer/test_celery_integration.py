"""A real worker on a real Redis: routing, JSON serialisation and the DB all in the path."""

from __future__ import annotations

import uuid

import pytest

from questions.models import Topic
from trainer import health
from trainer.tasks import diagnostics_roundtrip

pytestmark = [pytest.mark.celery_integration, pytest.mark.django_db(transaction=True)]


def test_a_task_round_trips_through_the_worker_and_sees_the_database(live_worker):
    Topic.objects.create(slug="kv-cache", title="KV cache", order=1)
    nonce = uuid.uuid4().hex
    reply = diagnostics_roundtrip.delay(nonce).get(timeout=20)
    assert reply["nonce"] == nonce
    assert reply["topics"] == 1  # the worker reads the row this test committed


def test_the_task_is_routed_to_the_default_queue(live_worker):
    result = diagnostics_roundtrip.apply_async(args=["x"])
    assert result.get(timeout=20)["nonce"] == "x"
    assert (
        diagnostics_roundtrip.app.amqp.router.route({}, diagnostics_roundtrip.name)["queue"].name
        == "default"
    )


def test_healthz_lists_the_worker_and_its_queues(live_worker, client, settings, redis_url):
    settings.REDIS_URL = redis_url
    settings.HEALTHZ_TOKEN = "celery-integration"
    for probe in health.PROBES:
        probe.reset()
    body = client.get("/healthz?deep=1", headers={"X-Healthz-Token": "celery-integration"}).json()
    assert body["status"] == "ok", body
    (worker,) = [w for w in body["celery"]["workers"] if w["name"] == live_worker.hostname]
    assert worker["queues"] == ["default", "lab-cpu"]
    assert body["roundtrip"]["ok"] is True
