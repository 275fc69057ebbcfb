"""Lab runs: start (validate, limit, route, enqueue), execute (in a worker: measure, save,
stream), cancel, and reap runs whose worker died. Views and tasks call only these."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from lab import streams
from lab.conditions import Meter
from lab.conditions import describe as describe_conditions
from lab.labs import get_lab
from lab.labs.base import LabCancelled, RunContext
from lab.models import LabPoint, LabRun

log = logging.getLogger(__name__)

ACTIVE = (LabRun.Status.QUEUED, LabRun.Status.RUNNING)
TERMINAL = (LabRun.Status.DONE, LabRun.Status.FAILED, LabRun.Status.CANCELLED)
CANCEL_POLL_S = 0.25  # a cancel request is noticed within this long after the next point
HEARTBEAT_S = 2.0
# A run whose worker died is failed, not run again (docs/OPERATIONS.md, "Long jobs").
NOT_RERUN = "It is not re-run automatically: start it again from the lab's page."


class RunRefused(Exception):  # a user-facing refusal, not a bug
    """The run cannot start; the message says why and what to do."""


class QueueUnavailable(RunRefused):
    """The broker (Redis) did not take the run's message; the run was not recorded."""


QUEUE_UNAVAILABLE = (
    "The lab queue is unavailable right now (the broker, Redis, does not answer), so the "
    "run was not started and nothing was recorded. Your parameters are still in the form: "
    "try again in a minute. Practice questions and mock interviews keep working meanwhile."
)


# ---------------------------------------------------------------- payloads (DB == stream)


def point_payload(point: LabPoint) -> dict[str, Any]:
    return {
        "seq": point.seq,
        "series": point.series,
        "x": point.x,
        "y": point.y,
        "extra": point.extra,
    }


def status_payload(run: LabRun) -> dict[str, Any]:
    return {
        "status": run.status,
        "worker": run.worker,
        "device": run.device,
        "error": run.error,
        "summary": run.summary,
        "conditions": describe_conditions(run.conditions),
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
    }


def _clear_stream(run_id: int) -> None:
    """Drop any stream left under this run's key (a database reset reuses run ids)."""
    try:
        streams.client().delete(streams.key(run_id))
    except redis.RedisError as exc:
        log.warning("lab run %s: could not clear its stream: %s", run_id, exc)


def _publish(run_id: int, kind: str, data: dict[str, Any]) -> None:
    try:
        streams.publish(run_id, kind, data)
    except redis.RedisError as exc:  # the DB has it; live viewers fall back to polling it
        log.warning("lab run %s: could not stream a %s entry: %s", run_id, kind, exc)


def predicted_points(run: LabRun) -> list[dict[str, Any]]:
    """The lab's prediction for this run's params (drawn before any measurement)."""
    lab = get_lab(run.lab)
    try:  # defaults first: a run stored before a parameter was added still has a prediction
        return [p.as_dict() for p in lab.predict({**lab.defaults(), **run.params})]
    except Exception:
        log.exception("lab %s: predict() failed for run %s", run.lab, run.pk)
        return []


# ---------------------------------------------------------------- start


def start_run(user, slug: str, raw_params: dict[str, Any], gpu: bool = False) -> LabRun:
    """Validate, check the user's limit, create and enqueue a run (after commit).

    Raises KeyError (unknown lab), LabParamError (bad params), RunRefused (limit/no GPU),
    QueueUnavailable (Redis down: nothing recorded)."""
    lab = get_lab(slug)
    params = lab.clean(raw_params)
    queue = "lab-gpu" if (lab.needs_gpu or gpu) else "lab-cpu"
    _check_broker()  # first: with Redis down no worker answers, but that is not the reason
    if queue == "lab-gpu" and not any("lab-gpu" in w["queues"] for w in workers_online()):
        raise RunRefused(
            "No worker serves the lab-gpu queue right now, so a GPU run would only wait. "
            + (
                "This lab needs a GPU; try again when a GPU node is online."
                if lab.needs_gpu
                else "Run it on the CPU instead."
            )
        )
    reap_stale_runs()
    limit = settings.LAB_MAX_ACTIVE_RUNS
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()  # serialise
        active = list(
            LabRun.objects.filter(owner=user, status__in=ACTIVE).values_list("pk", flat=True)
        )
        if len(active) >= limit:
            ids = ", ".join(f"#{pk}" for pk in active)
            raise RunRefused(
                f"You already have {len(active)} lab runs queued or running ({ids}); the limit "
                f"is {limit}. Wait for one to finish or cancel it, then start this one."
            )
        run = LabRun.objects.create(
            owner=user, lab=lab.slug, params=params, queue=queue, task_id=str(uuid.uuid4())
        )
        # Raised from the commit when the broker refuses the message: the run is withdrawn
        # (deleted) and the caller gets QueueUnavailable, so no `queued` run waits for a
        # message that does not exist.
        transaction.on_commit(lambda: _enqueue_or_withdraw(run, lab.time_limit_s))
    _clear_stream(run.pk)
    return run


BROKER_PING_TIMEOUT_S = 2.0


def _check_broker() -> None:
    """Refuse at once when Redis does not answer: sending the message would fail anyway."""
    from trainer import redis_server

    if not redis_server.ping(settings.REDIS_URL, timeout_s=BROKER_PING_TIMEOUT_S):
        log.warning("lab run refused: Redis does not answer PING")
        raise QueueUnavailable(QUEUE_UNAVAILABLE)


# The longest a lab start waits for the broker to take its message (a publish takes ~2 ms).
# Celery's own bounds are far longer when Redis stalls without closing its connections: the
# result backend subscribes with up to 20 retries, each waiting for the socket timeout.
ENQUEUE_TIMEOUT_S = 5.0


def _enqueue_or_withdraw(run: LabRun, time_limit_s: int) -> None:
    """Send the run's message, waiting at most ENQUEUE_TIMEOUT_S (the send runs in a
    thread of its own, which the socket timeouts end later if Redis never answers)."""
    sent: Future = Future()

    def send() -> None:
        try:
            _enqueue(run, time_limit_s)
        except BaseException as exc:  # handed to the request thread below
            sent.set_exception(exc)
        else:
            sent.set_result(None)

    threading.Thread(target=send, name=f"lab-enqueue-{run.pk}", daemon=True).start()
    try:
        sent.result(timeout=ENQUEUE_TIMEOUT_S)
    except Exception as exc:  # kombu OperationalError, the result backend's RuntimeError
        # when it cannot subscribe, or no answer in time: either way the run is withdrawn.
        # Should the message reach the queue after all (a paused Redis that resumes runs the
        # command already in its socket), the worker finds no run with that task id and does
        # nothing (execute_run returns "stale").
        if isinstance(exc, FutureTimeout):
            exc = TimeoutError(
                f"the broker did not take the message within {ENQUEUE_TIMEOUT_S:g} s"
            )
        log.warning("lab run %s: the broker refused it (%r); run withdrawn", run.pk, exc)
        LabRun.objects.filter(pk=run.pk, status=LabRun.Status.QUEUED).delete()
        raise QueueUnavailable(QUEUE_UNAVAILABLE) from exc


def _enqueue(run: LabRun, time_limit_s: int) -> None:
    from lab import tasks

    task = tasks.run_lab_gpu if run.queue == "lab-gpu" else tasks.run_lab_cpu
    # One attempt (no publish retries): a refusal withdraws the run and the learner tries
    # again; each wait on the socket ends after settings.BROKER_SOCKET_TIMEOUT_S.
    task.apply_async(
        args=[run.pk],
        task_id=run.task_id,
        queue=run.queue,
        soft_time_limit=time_limit_s,
        time_limit=time_limit_s + 30,
        retry=False,
    )


# ---------------------------------------------------------------- execute (worker side)


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
    _clear_stream(run_id)
    liveness = _Liveness(run_id, last_beat=time.monotonic())
    ctx = RunContext(
        params=dict(run.params), is_cancelled=liveness.is_cancelled, beat=liveness.beat
    )
    seq, status, error = 0, LabRun.Status.DONE, ""
    started = time.perf_counter()
    try:
        ctx.device = _device_for(run.queue)
        run.device = device_name(ctx.device)
        LabRun.objects.filter(pk=run_id).update(device=run.device)
        _publish(run_id, "status", status_payload(run))
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
            _publish(run_id, "point", point_payload(saved))
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
    return _finish(run_id, status, error, summary, meter.end_record())


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
        _publish(run_id, "status", status_payload(run))
    return run.status


# ---------------------------------------------------------------- cancel and reap


def can_view(user, run: LabRun) -> bool:
    """The owner, or an operator holding lab.view_labrun (superusers do). Not every staff
    user: authors are staff (for the admin) and must not read learners' runs."""
    return user.is_authenticated and (run.owner_id == user.pk or user.has_perm("lab.view_labrun"))


def can_cancel(user, run: LabRun) -> bool:
    """The owner, or an operator holding lab.change_labrun."""
    return user.is_authenticated and (run.owner_id == user.pk or user.has_perm("lab.change_labrun"))


def cancel_run(run: LabRun) -> LabRun:
    """Queued: revoke and mark cancelled now. Running: ask the worker (it stops at the next
    point). Already ended: nothing."""
    if run.status == LabRun.Status.QUEUED:
        now = timezone.now()
        if LabRun.objects.filter(pk=run.pk, status=LabRun.Status.QUEUED).update(
            status=LabRun.Status.CANCELLED, cancel_requested=True, finished=now
        ):
            from trainer.celery import app

            try:  # a courtesy: execute_run skips a cancelled run even if this is lost
                app.control.revoke(run.task_id)
            except Exception as exc:
                log.warning("run %s: revoke failed (%s); the worker will skip it", run.pk, exc)
            run.refresh_from_db()
            _publish(run.pk, "status", status_payload(run))
            return run
    if run.status == LabRun.Status.RUNNING:
        LabRun.objects.filter(pk=run.pk).update(cancel_requested=True)
    run.refresh_from_db()
    return run


def reap_stale_runs() -> int:
    """Fail running runs whose worker stopped heart-beating (died, killed, lost); their
    points stay. Returns how many were reaped."""
    limit = settings.LAB_STALE_SECONDS
    cutoff = timezone.now() - timedelta(seconds=limit)
    reaped = 0
    for run in LabRun.objects.filter(status=LabRun.Status.RUNNING, heartbeat__lt=cutoff):
        last = run.heartbeat.strftime("%H:%M:%S UTC") if run.heartbeat else "never"
        error = (
            f"The worker {run.worker or '(unknown)'} stopped reporting (last heartbeat "
            f"{last}, more than {limit} s ago): it probably died or was restarted. "
            f"The {run.points.count()} points it recorded are kept. {NOT_RERUN}"
        )
        if LabRun.objects.filter(pk=run.pk, status=LabRun.Status.RUNNING).update(
            status=LabRun.Status.FAILED, error=error, finished=timezone.now()
        ):
            run.refresh_from_db()
            _publish(run.pk, "status", status_payload(run))
            reaped += 1
    return reaped


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
    _publish(run_id, "status", status_payload(run))
    return True


# ---------------------------------------------------------------- lost messages

REQUEUE_GRACE_S = 5.0  # a run this young may still be between its commit and its publish


def _message_task_id(raw: bytes | str | dict) -> str | None:
    message = json.loads(raw) if isinstance(raw, (bytes, str)) else raw
    headers = message.get("headers") or {}
    return headers.get("id") or (message.get("properties") or {}).get("correlation_id")


def task_ids_in_broker(queues: set[str]) -> set[str] | None:
    """Task ids of every message the broker still holds for `queues`: waiting in a queue, or
    delivered to a worker and not yet acknowledged (kombu's Redis transport keeps those in
    its `unacked` hash until the ack). None when the broker is not Redis (unknown)."""
    from trainer.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        if not hasattr(channel, "unacked_key"):
            return None
        client = channel.client
        ids: set[str | None] = set()
        for queue in queues:
            for priority in channel.priority_steps:
                for raw in client.lrange(channel._q_for_pri(queue, priority), 0, -1):
                    ids.add(_message_task_id(raw))
        for raw in client.hvals(channel.unacked_key):
            ids.add(_message_task_id(json.loads(raw)[0]))  # [message, exchange, routing key]
    ids.discard(None)
    return ids


def requeue_lost_runs(grace_s: float = REQUEUE_GRACE_S) -> list[int]:
    """Send again the queued runs whose message the broker no longer holds (Redis restarted
    without persistence, or was flushed): the DB is the source of truth. Same task id, so a
    message that was not lost after all only makes a duplicate that execute_run ignores
    (the run is no longer queued when it arrives). Returns the ids of the runs sent again.

    Called by the workers on every (re)connection to the broker and periodically
    (trainer.celery.RequeueLostLabRuns)."""
    cutoff = timezone.now() - timedelta(seconds=grace_s)
    queued = list(
        LabRun.objects.filter(status=LabRun.Status.QUEUED, created__lt=cutoff).exclude(
            task_id=""  # start_run always sets one; a row made another way was never sent
        )
    )
    if not queued:
        return []
    present = task_ids_in_broker({run.queue for run in queued})
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
        _enqueue(run, lab.time_limit_s)
        sent.append(run.pk)
    return sent


# ---------------------------------------------------------------- workers


def workers_online(timeout: float = 1.0) -> list[dict[str, Any]]:
    """Workers answering a broadcast now, with the queues they consume (cached 10 s)."""
    from django.core.cache import cache

    cached = cache.get("lab:workers")
    if cached is not None:
        return cached
    from trainer.celery import app

    try:
        replies = app.control.inspect(timeout=timeout).active_queues() or {}
        active = app.control.inspect(timeout=timeout).active() or {}
    except Exception as exc:  # broker down: say so rather than crash the page
        log.warning("could not inspect workers: %s", exc)
        return []
    workers = [
        {
            "name": name,
            "queues": sorted(q["name"] for q in queues),
            "active": len(active.get(name, [])),
        }
        for name, queues in sorted(replies.items())
    ]
    cache.set("lab:workers", workers, 10)
    return workers
