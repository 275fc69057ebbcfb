"""The lab catalog is consistent with the bank, and the lab pages work: catalog, run form
(bounds shown, errors explained), run page, my runs, the staff queue, and access rules."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import call_command

from lab.labs import LABS
from lab.labs.base import Param
from lab.models import LabPoint, LabRun
from questions.bank import BANK_DIR

EXPECTED = {
    "two-phase", "kv-cache-growth", "kv-vs-no-cache", "batching", "paging", "prefix-caching",
    "quantization", "speculative-decoding", "attention-memory", "cancellation",
    "http-cancellation", "latency-vs-load", "waterfall", "retry-storm",
    "long-context-admission", "disaggregation",
}  # fmt: skip


def bank_topics_and_lab_refs() -> tuple[set[str], set[str]]:
    topics, refs = set(), set()
    for path in BANK_DIR.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "topic" in data:
            topics.add(data["topic"]["slug"])
            for q in data.get("questions", []):
                refs.update(q.get("related_labs", []))
    return topics, refs


def test_every_lab_the_bank_refers_to_exists_and_belongs_to_bank_topics():
    topics, refs = bank_topics_and_lab_refs()
    assert refs <= set(LABS), f"bank refers to labs that do not exist: {refs - set(LABS)}"
    assert set(LABS) == EXPECTED
    for lab in LABS.values():
        assert lab.topics and set(lab.topics) <= topics, lab.slug


@pytest.mark.parametrize("slug", sorted(LABS))
def test_each_lab_declares_a_consistent_schema(slug):
    lab = LABS[slug]
    names = [s.name for s in lab.series]
    assert len(names) == len(set(names))
    for s in lab.series:
        assert s.kind in ("measured", "predicted")
        assert not s.predicts or s.predicts in names
        # a series on the second or third axis has that axis titled (its unit shown)
        assert s.axis in ("y", "y2", "y3")
        assert s.axis == "y" or getattr(lab.chart, f"{s.axis}_title"), (s.name, s.axis)
        if s.predicts:  # a prediction is drawn on the axis of what it predicts
            assert s.axis == lab.series_by_name()[s.predicts].axis, s.name
    params = lab.clean({})  # the defaults are valid
    assert params == lab.defaults()
    assert {p.series for p in lab.predict(params)} <= set(names)
    for p in lab.params:
        if p.kind in ("int", "float"):
            assert p.min is not None and p.max is not None and p.min <= p.default <= p.max
    assert 10 <= lab.time_limit_s <= 600


def test_param_errors_read_well():
    p = Param("batch", "Batch size", "int", 8, min=1, max=64)
    for raw, message in [
        ("65", "must be at most 64, not 65"),
        ("0", "must be at least 1, not 0"),
        ("2.5", "must be a whole number, not 2.5"),
        ("eight", "must be a number, not 'eight'"),
        ("nan", "must be a finite number"),
    ]:
        with pytest.raises(ValueError) as err:
            p.clean(raw)
        assert str(err.value) == message
    assert p.clean("") == 8 and p.clean(" 16 ") == 16


@pytest.fixture
def learner(db):
    call_command("load_bank", verbosity=0)
    return get_user_model().objects.create_user("ada", password="x")


def test_catalog_and_form_pages(client, learner):
    assert client.get("/lab/").status_code == 302  # log in first
    client.force_login(learner)
    page = client.get("/lab/").content.decode()
    for lab in LABS.values():
        assert f'href="/lab/{lab.slug}/"' in page
    form = client.get("/lab/kv-cache-growth/").content.decode()
    assert "16 – 512 tokens (default 384)" in form and "fp32 / bf16 / fp16" in form
    reply = client.post("/lab/kv-cache-growth/", {"tokens": "600", "dtype": "fp32"})
    assert reply.status_code == 400
    assert "Tokens to cache must be at most 512 tokens, not 600." in reply.content.decode()
    assert not LabRun.objects.exists()
    assert client.get("/lab/no-such-lab/").status_code == 404


def test_run_pages_are_private_and_the_queue_is_staff_only(client, learner):
    run = LabRun.objects.create(owner=learner, lab="kv-cache-growth", params={"tokens": 64},
                                status="failed", error="RuntimeError: boom")  # fmt: skip
    LabPoint.objects.create(run=run, seq=0, series="gqa", x=16, y=16384)
    client.force_login(learner)
    page = client.get(f"/lab/runs/{run.pk}/").content.decode()
    assert "RuntimeError: boom" in page and '"points": [{"seq": 0' in page
    assert f"/lab/runs/{run.pk}/" in client.get("/lab/runs/").content.decode()
    assert client.get("/lab/queue/").status_code == 403  # lab operators only
    other = get_user_model().objects.create_user("eve", password="x")
    client.force_login(other)
    assert client.get(f"/lab/runs/{run.pk}/").status_code == 404
    assert client.post(f"/lab/runs/{run.pk}/cancel").status_code == 404
    # Staff alone (an author, for the admin) is not a lab operator.
    author = get_user_model().objects.create_user("writer", password="x", is_staff=True)
    client.force_login(author)
    assert client.get(f"/lab/runs/{run.pk}/").status_code == 404
    assert client.get("/lab/queue/").status_code == 403
    staff = get_user_model().objects.create_user("ops", password="x", is_staff=True)
    staff.user_permissions.add(Permission.objects.get(codename="view_labrun"))
    client.force_login(staff)
    assert client.get(f"/lab/runs/{run.pk}/").status_code == 200
    assert "Queued and running" in client.get("/lab/queue/").content.decode()
