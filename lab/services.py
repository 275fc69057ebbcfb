"""Lab runs, what the views call: start (validate, limit, route, enqueue), who may view or
cancel, cancel, reap runs whose worker died, the prediction and the payloads the page and
the stream share. The worker's side (execute, fail a lost run, requeue lost messages) is
lab/runner.py; Redis streams and Celery queues are lab/broker.py."""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from lab import broker
from lab.conditions import describe as describe_conditions
from lab.labs import get_lab
from lab.models import LabPoint, LabRun
from lab.summary_format import constants_line, summary_rows

log = logging.getLogger(__name__)

ACTIVE = (LabRun.Status.QUEUED, LabRun.Status.RUNNING)
TERMINAL = (LabRun.Status.DONE, LabRun.Status.FAILED, LabRun.Status.CANCELLED)
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
        "summary_rows": summary_rows(run.summary),
        "constants": constants_line(run.summary),
        "verdicts": (run.summary or {}).get("verdicts", []),
        "cancel_requested": run.cancel_requested,
        "conditions": describe_conditions(run.conditions),
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
    }


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
    if queue == "lab-gpu" and not any("lab-gpu" in w["queues"] for w in broker.workers_online()):
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
    broker.clear_stream(run.pk)
    return run


def _check_broker() -> None:
    """Refuse at once when Redis does not answer: sending the message would fail anyway."""
    if not broker.reachable():
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
            broker.enqueue(
                run_id=run.pk, task_id=run.task_id, queue=run.queue, time_limit_s=time_limit_s
            )
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
            try:  # a courtesy: execute_run skips a cancelled run even if this is lost
                broker.revoke(run.task_id)
            except Exception as exc:
                log.warning("run %s: revoke failed (%s); the worker will skip it", run.pk, exc)
            run.refresh_from_db()
            broker.publish(run.pk, "status", status_payload(run))
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
            broker.publish(run.pk, "status", status_payload(run))
            reaped += 1
    return reaped
