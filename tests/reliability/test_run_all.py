"""`make run`'s terminal: one line per service, the URL and the demo logins; the processes'
own output goes to var/log/ (a real run: embedded Redis, two Celery workers, uvicorn)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from procs import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_make_run_prints_a_short_banner_and_logs_to_var_log(tmp_path):
    port = free_port()
    env = {**os.environ, "VAR_DIR": str(tmp_path), "PORT": str(port), "TRAINER_WARM_GRADER": "0"}
    env.pop("REDIS_URL", None)
    env.pop("DATABASE_URL", None)  # its own SQLite under the temporary VAR_DIR
    proc = subprocess.Popen(
        [sys.executable, "-m", "manage", "run_all", "--web-workers", "1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops"):
                break
        banner = "\n".join(lines)
        assert f"Trainer on http://127.0.0.1:{port}/" in banner, banner
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        for name in ("web", "worker-default", "worker-lab"):
            assert f"(log: {tmp_path / 'log' / name}.log)" in banner
            assert (tmp_path / "log" / f"{name}.log").exists()
        assert "learner / " in banner and "author / " in banner
        assert len(lines) <= 14, banner  # no Celery banners, no uvicorn start-up chatter
        assert "celery@" not in banner and "Waiting for application startup" not in banner
        # The workers' chatter is in their logs.
        deadline = time.monotonic() + 60
        log = tmp_path / "log" / "worker-lab.log"
        while "ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "ready" in log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rest = proc.communicate(timeout=60)[0]
    assert "Stopped web, worker and Redis." in rest
