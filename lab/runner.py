"""A lab run in a worker: execute it (measure, save, stream, heed cancel, keep a heartbeat),
fail it when its process died, and send again the queued runs whose message the broker
lost. lab/tasks.py calls these with a run id; views never do (they call lab/services.py)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction
from django.utils import timezone

from lab import broker
from lab.conditions import Meter
from lab.labs import get_lab
from lab.labs.base import LabCancelled, Point, RunContext
from lab.labs.verdicts import judge_run
from lab.models import LabPoint, LabRun
from lab.services import ACTIVE, NOT_RERUN, point_payload, status_payload
from lab.summary_format import live_summary

log = logging.getLogger(__name__)

CANCEL_POLL_S = 0.25  # a cancel request is noticed within this long after the next point
HEARTBEAT_S = 2.0
REQUEUE_GRACE_S = 5.0  # a run this young may still be between its commit and its publish


@dataclass
class _Liveness:
    """Heartbeats and cancel checks, each throttled: one cheap UPDATE/SELECT at most."""

    run_id: int
    last_beat: float = 0.0
    last_poll: float = 0.0
    cancelled: bool = False

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.last_beat >= HEARTBEAT_S:
            LabRun.objects.filter(pk=self.run_id).update(heartbeat=timezone.now())
            self.last_beat = now

    def is_cancelled(self) -> bool:
        now = time.monotonic()
        if not self.cancelled and now - self.last_poll >= CANCEL_POLL_S:
            self.last_poll = now
            row = LabRun.objects.filter(pk=self.run_id).values("status", "cancel_requested")
            row = row.first()
            self.cancelled = (
                row is None
                or row["cancel_requested"]
                or (
                    row["status"] != LabRun.Status.RUNNING  # reaped or cancelled meanwhile
                )
            )
        return self.cancelled


def calibration_path():
    """The device-constants cache (lab/labs/calibration.py): a JSON file under VAR_DIR, like
    the project's other local state; measured again when missing or over 24 h old."""
    from django.conf import settings

    return settings.VAR_DIR / "lab_calibration.json"


def calibrate_at_start() -> None:
    """At worker start: measure this device's constants for the bundled model's fp32 weights
    when the cache lacks them or they are over 24 h old; a failure is logged, and each run
    checks (and measures) again."""
    import torch

    from lab.labs.calibration import CalibrationError, constants_for
    from lab.labs.common import bundled_model

    model = bundled_model("target")
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    try:
        c = constants_for("cpu", torch.float32, weight_bytes, path=calibration_path())
        log.info("lab device constants: %s", c.describe())
    except (CalibrationError, OSError) as exc:
        log.warning("lab calibration at worker start failed: %s", exc)


def _device_for(queue: str) -> str:
    import torch

    if queue == "lab-gpu":
        if not torch.cuda.is_available():
            raise RuntimeError(
                "This run was routed to lab-gpu but the worker that took it has no CUDA "
                "device; check which nodes consume lab-gpu (docs/OPERATIONS.md)."
            )
        return "cuda"
    return "cpu"


def execute_run(run_id: int, hostname: str, task_id: str | None = None) -> str:
    """Run a queued lab run to the end in this worker; returns its final status.

    A message whose task id is not the run's (a stale redelivery, or a leftover from a
    database whose ids were reused) is ignored."""
    from lab.labs.common import device_name

    with transaction.atomic():
        run = LabRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or (task_id and run.task_id and task_id != run.task_id):
            return "stale"
        if run.status != LabRun.Status.QUEUED:
            return run.status  # cancelled while queued, or redelivered after it started
        meter = Meter.start()
        run.status, run.worker = LabRun.Status.RUNNING, hostname
        run.started = run.heartbeat = timezone.now()
        run.conditions = meter.start_record()
        run.save(update_fields=["status", "worker", "started", "heartbeat", "conditions"])
    broker.clear_stream(run_id)
    liveness = _Liveness(run_id, last_beat=time.monotonic())
    ctx = RunContext(
        params=dict(run.params),
        is_cancelled=liveness.is_cancelled,
        beat=liveness.beat,
        calibration_path=calibration_path(),
    )
    seq, status, error = 0, LabRun.Status.DONE, ""
    shown: dict[str, Any] = {}
    points: list[Point] = []
    started = time.perf_counter()
    try:
        ctx.device = _device_for(run.queue)
        run.device = device_name(ctx.device)
        LabRun.objects.filter(pk=run_id).update(device=run.device)
        broker.publish(run_id, "status", status_payload(run))
        for point in get_lab(run.lab).run(ctx):
            if not (math.isfinite(point.x) and math.isfinite(point.y)):
                raise ValueError(f"the lab produced a non-finite point {point!r}")
            saved = LabPoint.objects.create(
                run_id=run_id,
                seq=seq,
                series=point.series,
                x=float(point.x),
                y=float(point.y),
                extra=point.extra,
            )
            broker.publish(run_id, "point", point_payload(saved))
            shown = _publish_live(run_id, ctx.summary, shown)
            points.append(point)
            seq += 1
            liveness.beat()
            if liveness.is_cancelled():
                raise LabCancelled
    except LabCancelled:
        status = LabRun.Status.CANCELLED
    except SoftTimeLimitExceeded:
        status = LabRun.Status.FAILED
        limit = get_lab(run.lab).time_limit_s
        error = f"Stopped at this lab's time limit ({limit} s); the {seq} points so far are kept."
    except Exception as exc:  # a lab bug or bad environment: record it readably, keep points
        log.exception("lab run %s failed", run_id)
        status, error = LabRun.Status.FAILED, f"{type(exc).__name__}: {exc}"
    summary = {**ctx.summary, "points": seq, "wall_s": round(time.perf_counter() - started, 3)}
    conditions = meter.end_record()
    if status == LabRun.Status.DONE:  # a verdict per predicted series, contention stated
        summary["verdicts"] = [v.as_dict() for v in judge_run(get_lab(run.lab), points,
                                                              conditions)]  # fmt: skip
    return _finish(run_id, status, error, summary, conditions)


def _publish_live(run_id: int, summary: dict[str, Any], shown: dict[str, Any]) -> dict[str, Any]:
    """Save and send the constants, calibration and warm-up lines (summary_format.LIVE_KEYS)
    once a lab has set or changed them, so the run page says what the prediction uses while
    the run runs. Returns what is shown now."""
    live = live_summary(summary)
    if live == shown:
        return shown
    if LabRun.objects.filter(pk=run_id, status=LabRun.Status.RUNNING).update(summary=live):
        broker.publish(run_id, "status", status_payload(LabRun.objects.get(pk=run_id)))
    return live


def _finish(
    run_id: int,
    status: str,
    error: str,
    summary: dict[str, Any],
    conditions: dict[str, Any] | None = None,
) -> str:
    """Record the end unless someone else already ended the run (reaper, cancel)."""
    now = timezone.now()
    fields: dict[str, Any] = {"conditions": conditions} if conditions is not None else {}
    updated = LabRun.objects.filter(pk=run_id, status=LabRun.Status.RUNNING).update(
        status=status, error=error, summary=summary, finished=now, heartbeat=now, **fields
    )
    run = LabRun.objects.get(pk=run_id)
    if updated:
        broker.publish(run_id, "status", status_payload(run))
    return run.status


# ---------------------------------------------------------------- a run whose process died


def fail_lost_run(run_id: int, task_id: str | None, reason: str) -> bool:
    """The pool process executing this run is gone (killed by the OOM killer or a signal,
    crashed, or stopped at the hard time limit) while its worker lives on: fail the run now
    (`reason`: what happened, in a sentence), with its points kept, instead of leaving it to
    the stale-heartbeat reaper. Called in the worker's main process (lab.tasks, on
    task_failure). Only the message that owns the run (same task id) can fail it, and only
    while it is queued or running."""
    run = LabRun.objects.filter(pk=run_id, status__in=ACTIVE).first()
    if run is None or (task_id and run.task_id and task_id != run.task_id):
        return False
    error = f"{reason} The {run.points.count()} points it recorded are kept. {NOT_RERUN}"
    now = timezone.now()
    if not LabRun.objects.filter(pk=run_id, status__in=ACTIVE).update(
        status=LabRun.Status.FAILED, error=error, finished=now, heartbeat=now
    ):
        return False
    run.refresh_from_db()
    broker.publish(run_id, "status", status_payload(run))
    return True


# ---------------------------------------------------------------- lost messages


def requeue_lost_runs(grace_s: float = REQUEUE_GRACE_S) -> list[int]:
    """Send again the queued runs whose message the broker no longer holds (Redis restarted
    without persistence, or was flushed): the DB is the source of truth. Same task id, so a
    message that was not lost after all only makes a duplicate that execute_run ignores
    (the run is no longer queued when it arrives). Returns the ids of the runs sent again.

    Called by the workers on every (re)connection to the broker and periodically
    (lab.tasks.RequeueLostLabRuns)."""
    cutoff = timezone.now() - timedelta(seconds=grace_s)
    queued = list(
        LabRun.objects.filter(status=LabRun.Status.QUEUED, created__lt=cutoff).exclude(
            task_id=""  # start_run always sets one; a row made another way was never sent
        )
    )
    if not queued:
        return []
    present = broker.task_ids_in_broker({run.queue for run in queued})
    if present is None:
        return []
    sent = []
    for run in queued:
        if run.task_id in present:
            continue
        try:
            lab = get_lab(run.lab)
        except KeyError:
            continue
        log.warning("lab run %s: its message was lost by the broker; queued again", run.pk)
        broker.enqueue(
            run_id=run.pk, task_id=run.task_id, queue=run.queue, time_limit_s=lab.time_limit_s
        )
        sent.append(run.pk)
    return sent
