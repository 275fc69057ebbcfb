"""Lab workers run at LAB_WORKER_NICE, and every run records the conditions it measured
under (load average, CPU share, torch threads, niceness) and shows them on its page.

- A run executed by the session's real Celery worker (`live_worker`) stores the conditions
  with sane values and the run page shows the line computed from them.
- A real `celery -A trainer worker -Q lab-cpu` process (tests/reliability/procs.py) with
  LAB_WORKER_NICE=7: every thread of its pool process runs at niceness 7 (read from
  /proc/<pid>/task/<tid>/stat), its main process and a worker consuming only `default` do
  not, and a run it executes records nice 7.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from lab import services
from lab.conditions import describe
from lab.models import LabRun
from tests.reliability.procs import Procs, QueueToOurselves

pytestmark = [pytest.mark.celery_integration, pytest.mark.django_db(transaction=True)]
TINY_KV = {"tokens": 64, "prompt_tokens": 16, "every": 8, "block_size": 8}


def wait_for(predicate, timeout: float = 90.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def finished(run: LabRun) -> bool:
    run.refresh_from_db()
    return run.status in ("done", "failed", "cancelled")


def thread_nices(pid: int) -> dict[int, int]:
    """Niceness of every thread of `pid` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()  # fields 3.. after "pid (comm)"
        out[int(task.name)] = int(fields[19 - 3])
    return out


def check_conditions(c: dict, nice: int) -> None:
    cpus = os.cpu_count() or 1
    for key in ("load_start", "load_end"):
        assert len(c[key]) == 3 and all(x >= 0 for x in c[key]), (key, c)
    assert c["cpus"] == cpus
    assert c["wall_s"] > 0 and c["cpu_s"] >= 0
    assert 0 < c["cpu_share_pct"] <= cpus * 100 + 0.1, c
    # cpu_s and wall_s are stored to the ms, the share from the unrounded times: allow the
    # rounding (a 0.26 s run read 99.3 % against 99.6 % from the stored times)
    rounding = 100 * 0.0005 * (1 + c["cpu_s"] / c["wall_s"]) / c["wall_s"]
    assert c["cpu_share_pct"] == pytest.approx(100 * c["cpu_s"] / c["wall_s"],
                                               abs=0.05 + rounding)  # fmt: skip
    assert isinstance(c["torch_threads"], int) and c["torch_threads"] >= 1
    assert c["nice"] == nice, c


@pytest.fixture
def user():
    return get_user_model().objects.create_user("ada-conditions", password="pw-ada-1")


def test_a_worker_run_records_its_conditions_and_the_page_shows_them(
    settings, redis_url, live_worker, user
):
    settings.REDIS_URL = redis_url
    run = services.start_run(user, "kv-cache-growth", TINY_KV)
    wait_for(lambda: finished(run), what="the run to finish")
    assert run.status == "done", run.error
    # This worker thread is not reniced (LAB_WORKER_NICE = 0 in the fixture): as started.
    check_conditions(run.conditions, nice=os.getpriority(os.PRIO_PROCESS, 0))
    client = Client()
    client.force_login(user)
    page = client.get(f"/lab/runs/{run.pk}/").content.decode()
    line = describe(run.conditions)
    assert f"CPU share {run.conditions['cpu_share_pct']:.0f} %" in line
    assert f"nice {run.conditions['nice']}" in line
    assert "at start" in line and "at end" in line
    assert f"Conditions: <span>{line}</span>" in page


def test_lab_worker_pool_processes_run_at_the_configured_niceness(redis_url, user, settings):
    settings.REDIS_URL = redis_url
    base = os.getpriority(os.PRIO_PROCESS, 0)
    nice = 7
    if base >= nice:
        pytest.skip(f"this test process already runs at niceness {base}")
    with QueueToOurselves("lab-cpu"), Procs(redis_url) as procs:
        lab = procs.worker("lab-nice", "lab-cpu", LAB_WORKER_NICE=str(nice), wait=False)
        default = procs.worker("default-nice", "default", LAB_WORKER_NICE=str(nice), wait=False)
        procs.wait(lab, default, timeout=120)

        def pool(worker) -> list[int]:
            return [pid for pid in worker.group_pids() if pid != worker.pid]

        (lab_pool,) = wait_for(lambda: pool(lab), what="the lab worker's pool process")
        (default_pool,) = wait_for(lambda: pool(default), what="the default worker's pool")
        nices = wait_for(
            lambda: (n := thread_nices(lab_pool)) and set(n.values()) == {nice} and n,
            timeout=30,
            what=f"every thread of the lab pool process at niceness {nice}",
        )
        assert nices and set(nices.values()) == {nice}
        # The worker's main process (broker, heartbeats) and a non-lab worker stay as started.
        assert set(thread_nices(lab.pid).values()) == {base}
        assert set(thread_nices(default_pool).values()) == {base}
        assert set(thread_nices(default.pid).values()) == {base}

        run = services.start_run(user, "kv-cache-growth", TINY_KV)
        wait_for(lambda: finished(run), what="the run to finish")
        assert run.status == "done", run.error
        assert run.worker == lab.info["node"]
        check_conditions(run.conditions, nice=nice)
        assert run.conditions["pid"] == lab_pool
