"""Start and drive the two `disagg_worker` processes (prefill and decode) of a lab run.

`spawn_pair(...)` yields (prefill, decode) `WorkerProcess`es that share a Unix domain socket
in a private temporary folder; on leaving the block (done, error or cancel) both are
terminated, killed if they linger, and the folder removed. Children are plain
`python -m` processes (a Celery worker's pool processes are daemonic and may not fork
multiprocessing children of their own). Imports no torch: the lab's side stays light.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the folder holding the `lab` package


class WorkerProcess:
    """One child: `send(cmd)` then `reply()`, or `call(cmd)`; errors become RuntimeError."""

    def __init__(self, role: str, socket_path: str, log, threads: int, block_size: int,
                 max_num_seqs: int):  # fmt: skip
        self.role, self.log = role, log
        cmd = [sys.executable, "-m", "lab.engine.disagg_worker", "--role", role,
               "--socket", socket_path, "--threads", str(threads),
               "--block-size", str(block_size), "--max-num-seqs", str(max_num_seqs)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
        # stderr to a file, not a pipe: a chatty child must never block on a full pipe
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, cwd=ROOT, env=env)  # fmt: skip
        self._buf = b""

    def send(self, cmd: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"The {self.role} engine process exited ({self.proc.wait()}): "
                               f"{self.stderr_tail()}") from None  # fmt: skip

    def reply(self, check: Callable[[], None] = lambda: None, timeout: float = 60) -> dict:
        """The next reply line; `check` runs every 0.1 s while waiting (a lab's cancel)."""
        return replies([self], check, timeout)[0]

    def poll(self, wait_s: float) -> dict | None:
        """The next reply if one arrives within `wait_s`, else None."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            if not select.select([fd], [], [], wait_s)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise RuntimeError(f"The {self.role} engine process exited "
                                   f"({self.proc.wait()}): {self.stderr_tail()}")  # fmt: skip
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"The {self.role} engine process failed: {answer['error']}")
        return answer

    def call(self, cmd: dict[str, Any], check: Callable[[], None] = lambda: None,
             timeout: float = 60) -> dict:  # fmt: skip
        self.send(cmd)
        return self.reply(check, timeout)

    def stderr_tail(self, chars: int = 1500) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-chars:].decode(errors="replace").strip()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # end of stdin: the child's loop ends
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


def replies(workers: list[WorkerProcess], check: Callable[[], None] = lambda: None,
            timeout: float = 60) -> list[dict]:  # fmt: skip
    """One reply from each worker, in order; the first error from any of them is raised at
    once (a failed prefill process must not leave the lab waiting on the decode one)."""
    deadline = time.monotonic() + timeout
    got: dict[int, dict] = {}
    while len(got) < len(workers):
        check()
        for i, w in enumerate(workers):
            if i not in got and (answer := w.poll(0.05)) is not None:
                got[i] = answer
        if len(got) < len(workers) and time.monotonic() > deadline:
            late = ", ".join(w.role for i, w in enumerate(workers) if i not in got)
            raise RuntimeError(f"The {late} engine process gave no answer within {timeout:g} s.")
    return [got[i] for i in range(len(workers))]


@contextlib.contextmanager
def spawn_pair(*, block_size: int = 16, max_num_seqs: int = 32, threads: int = 1,
               check: Callable[[], None] = lambda: None,
               timeout: float = 90) -> Iterator[tuple[WorkerProcess, WorkerProcess]]:  # fmt: skip
    """(prefill, decode) processes, both ready and the prefill one connected to the decode
    one's Unix domain socket; both stopped on exit."""
    with (
        tempfile.TemporaryDirectory(prefix="disagg-") as folder,
        tempfile.TemporaryFile() as decode_log,
        tempfile.TemporaryFile() as prefill_log,
    ):
        path = str(Path(folder) / "kv.sock")
        workers: list[WorkerProcess] = []
        try:
            decode = WorkerProcess("decode", path, decode_log, threads, block_size, max_num_seqs)
            workers.append(decode)
            prefill = WorkerProcess("prefill", path, prefill_log, threads, block_size,
                                    max_num_seqs)  # fmt: skip
            workers.append(prefill)
            replies([decode, prefill], check, timeout)  # the decode one listens once ready
            prefill.call({"cmd": "connect"}, check)
            yield prefill, decode
        finally:
            for w in workers:
                w.stop()
