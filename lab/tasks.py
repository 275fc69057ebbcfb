"""Celery tasks for lab runs, and the lab's hooks into the worker. The task only passes the
run's id to the runner: everything else (status, points, streaming, cancel, errors) lives in
lab/runner.py. Registered on the worker's own app (`worker_init`): the lost-message check
(RequeueLostLabRuns), the node name, niceness and torch threads for lab runs."""

from __future__ import annotations

import logging
import os
import socket

from celery import bootsteps, shared_task
from celery.exceptions import TimeLimitExceeded, WorkerLostError
from celery.signals import task_failure, worker_init, worker_process_init

from lab import runner

log = logging.getLogger(__name__)

# This worker's node name (e.g. celery@gpu-3), how many runs it executes at once and whether
# it consumes a lab queue; inherited by the pool's forks.
_NODE: dict = {"name": "", "concurrency": 1, "lab": False}
LAB_QUEUES = frozenset({"lab-cpu", "lab-gpu"})


@worker_init.connect
def _remember_node_name(sender=None, **kwargs) -> None:
    _NODE["name"] = getattr(sender, "hostname", "") or ""
    concurrency = getattr(sender, "concurrency", 1)  # "auto" is resolved after this signal
    _NODE["concurrency"] = (
        concurrency if isinstance(concurrency, int) and concurrency > 0 else (os.cpu_count() or 1)
    )
    _NODE["lab"] = bool(consumed_queues(sender) & LAB_QUEUES)


def consumed_queues(worker) -> set[str]:
    """The queues a worker consumes (-Q; all the app's queues when not given)."""
    amqp = getattr(getattr(worker, "app", None), "amqp", None)
    if amqp is None:
        return set()
    return set(amqp.queues.consume_from or amqp.queues)


def lower_priority(nice: int, *, whole_process: bool) -> int:
    """Raise this thread's (whole_process: every thread's) niceness to `nice`, never lower
    it (that needs privileges); returns this thread's niceness. Linux keeps niceness per
    thread, and threads started later inherit their creator's: called before torch starts
    its thread pool, the whole lab runs at `nice`."""
    tids = [0]
    if whole_process and os.path.isdir("/proc/self/task"):
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        except (ProcessLookupError, PermissionError, OSError):  # a thread gone meanwhile
            continue
    return os.getpriority(os.PRIO_PROCESS, 0)


def _lab_nice() -> int:
    from django.conf import settings

    return int(getattr(settings, "LAB_WORKER_NICE", 0))


def torch_threads() -> int:
    """Torch intra-op threads for one lab run: the CPUs shared among the runs this worker
    executes at once. Torch's default (every CPU, in every pool process) oversubscribes the
    cores as soon as two runs overlap or anything else is busy, and its threads then wait on
    each other: on 2 loaded cores a lab ran 9x slower with 2 threads than with 1, with gaps
    of 14 s between points (heartbeats missed: the reaper failed a healthy run)."""
    return max(1, (os.cpu_count() or 1) // _NODE["concurrency"])


def _limit_threads() -> None:
    """Set torch_threads() for this process, unless OMP_NUM_THREADS says otherwise."""
    import torch

    if "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() != (n := torch_threads()):
        torch.set_num_threads(n)


@worker_process_init.connect
def _limit_threads_in_pool_process(**kwargs) -> None:
    """Each prefork pool process (where runs overlap); a solo worker keeps torch's default.
    A pool process of a worker consuming a lab queue first drops to LAB_WORKER_NICE, before
    torch starts any thread: the web processes on the same cores come first."""
    if _NODE["lab"]:
        lower_priority(_lab_nice(), whole_process=True)
    _limit_threads()
    if _NODE["lab"]:
        runner.calibrate_at_start()  # cached for 24 h: a second or two at most


def _node(task) -> str:
    return _NODE["name"] or task.request.hostname or socket.gethostname()


@shared_task(bind=True, name="lab.tasks.run_lab_cpu", acks_late=True)
def run_lab_cpu(self, run_id: int) -> str:
    # Already done in a prefork pool process; a solo/threads worker runs labs in this thread.
    lower_priority(_lab_nice(), whole_process=False)
    return runner.execute_run(run_id, _node(self), task_id=self.request.id)


@shared_task(bind=True, name="lab.tasks.run_lab_gpu", acks_late=True)
def run_lab_gpu(self, run_id: int) -> str:
    lower_priority(_lab_nice(), whole_process=False)
    return runner.execute_run(run_id, _node(self), task_id=self.request.id)


@task_failure.connect
def _fail_run_whose_process_died(sender=None, task_id=None, exception=None, args=None, **kw):
    """In the worker's main process: the pool process running a lab died (OOM killer,
    SIGKILL, crash) or was stopped at the hard time limit. Celery acknowledges the message
    (late ack, no reject on worker lost: it is not run again) and the run is failed now."""
    if getattr(sender, "name", "") not in (run_lab_cpu.name, run_lab_gpu.name) or not args:
        return
    if isinstance(exception, WorkerLostError):
        node = _NODE["name"] or "its worker"
        reason = (
            f"The process running this lab on {node} died ({exception}); most often it ran "
            "out of memory or was killed."
        )
    elif isinstance(exception, TimeLimitExceeded):
        reason = "It was stopped at the hard time limit without finishing."
    else:
        return
    from django.db import close_old_connections

    try:
        runner.fail_lost_run(args[0], task_id, reason)
    finally:
        close_old_connections()


class RequeueLostLabRuns(bootsteps.StartStopStep):
    """The DB is the source of truth for lab runs, Redis keeps nothing on disk: each time a
    worker (re)connects to the broker, and every LAB_REQUEUE_EVERY_S while connected, queued
    runs whose message the broker no longer holds are sent again
    (lab.runner.requeue_lost_runs). Errors are logged, never raised into the consumer."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent, **kwargs):
        self.tref = None
        super().__init__(parent, **kwargs)

    def start(self, consumer):
        from django.conf import settings

        self.requeue()
        every = getattr(settings, "LAB_REQUEUE_EVERY_S", 60)
        if every and consumer.timer is not None:
            self.tref = consumer.timer.call_repeatedly(every, self.requeue)

    def stop(self, consumer):
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None

    shutdown = stop

    def requeue(self):
        from django.db import close_old_connections

        try:
            sent = runner.requeue_lost_runs()
            if sent:
                log.warning("lab runs queued again (their message was lost): %s", sent)
        except Exception as exc:  # the broker or the DB is down: the next start retries
            log.warning("could not check for lost lab-run messages: %s", exc)
        finally:
            close_old_connections()


@worker_init.connect
def _add_requeue_step(sender=None, **kwargs) -> None:
    """Sent after the worker imported the task modules (this one included) and before it
    builds its consumer, which then starts with this step."""
    app = getattr(sender, "app", None)
    if app is not None:
        app.steps["consumer"].add(RequeueLostLabRuns)
