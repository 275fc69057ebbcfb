"""A server in a child process, for labs, tests and benches: `spawn` runs
`python -m lab.engine.server` on a free loopback port and stops it afterwards; `read_metrics`
and `wait_idle` read its `/metrics`. Imports nothing of the server itself (no Starlette, no
torch), so a lab that only drives a server stays light."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator


def read_metrics(url: str) -> dict[str, float]:
    """The server's /metrics as {name without the mini_engine_ prefix: value}; `url` is the
    base URL ending in /v1."""
    import httpx

    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    pairs = (line.rsplit(None, 1) for line in text.splitlines() if line and line[0] != "#")
    # an info metric carries labels ('mini_engine_dtype_info{dtype="fp32",...} 1'): its name
    return {name.partition("{")[0].removeprefix("mini_engine_"): float(value)
            for name, value in pairs}  # fmt: skip


def wait_idle(url: str, check: Callable[[], None] = lambda: None, timeout: float = 120):
    """Metrics once nothing runs or waits (a naive server finishes its orphans first);
    `check` is called while waiting (a lab's cancel check)."""
    deadline = time.monotonic() + timeout
    while True:
        m = read_metrics(url)
        if m.get("running_requests") == 0 and m.get("in_flight_requests") == 0:
            return m
        if time.monotonic() > deadline:
            raise RuntimeError(f"The engine server did not go idle within {timeout:g} s.")
        check()
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def spawn(*args: str, timeout: float = 90, threads: int | None = 1) -> Iterator[str]:
    """Run `python -m lab.engine.server` on a free loopback port; yields the base URL
    (`http://127.0.0.1:PORT/v1`) once /health answers; stops the process on exit."""

    port = free_port()
    cmd = [sys.executable, "-m", "lab.engine.server", "--port", str(port), *args]
    if threads:
        cmd += ["--threads", str(threads)]
    # stderr to a file, not a pipe: a chatty server must never block on a full pipe.
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        yield from _serve_until_done(proc, log, port, timeout)


def _serve_until_done(proc, log, port: int, timeout: float) -> Iterator[str]:
    import httpx

    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(
                    f"The engine server exited ({proc.returncode}): {log.read()[-2000:]}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"The engine server did not answer /health within {timeout:g} s."
                )
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
