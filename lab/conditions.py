"""The conditions a lab run measured under: load average, its process's CPU share, torch
threads and niceness, recorded by the worker at the start and the end of every run (stored
in LabRun.conditions, shown on the run page). A slower measurement on a busy machine is then
explained by the numbers beside it, not guessed at.

CPU share = CPU time of the process running the lab (all its threads: time.process_time)
plus that of the child processes it started and waited for (an engine server, the
disaggregation lab's two engine processes), over the run's wall time, in % of one core; it
can reach cores × 100 % with several threads or children. Without the children, a lab whose
work runs in them would look starved (≈ 0 %) and every miss would read as contention.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any


def _loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not available on this platform
        return []


def _torch_threads() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.get_num_threads()


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@dataclass
class Meter:
    """Started when the run starts; `start_record()` and `end_record()` give what is stored."""

    wall0: float = 0.0
    cpu0: float = 0.0
    load0: tuple[float, ...] = ()

    @classmethod
    def start(cls) -> Meter:
        return cls(time.perf_counter(), _cpu_s(), tuple(_loadavg()))

    def start_record(self) -> dict[str, Any]:
        return {
            "load_start": list(self.load0),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),  # this thread's (Linux: per thread)
            "torch_threads": _torch_threads(),
            "cpus": os.cpu_count() or 1,
            "pid": os.getpid(),
        }

    def end_record(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        cpu = _cpu_s() - self.cpu0
        return {
            **self.start_record(),
            "load_end": _loadavg(),
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_share_pct": round(100.0 * cpu / wall, 1) if wall > 0 else None,
        }


def describe(conditions: dict[str, Any] | None) -> str:
    """One line for the run page, from what was recorded (empty when nothing was)."""
    if not conditions:
        return ""

    def load(values) -> str:
        return " / ".join(f"{v:.2f}" for v in (values or [])[:2]) or "—"

    parts = [f"load average (1 / 5 min) {load(conditions.get('load_start'))} at start"]
    if "load_end" in conditions:
        parts[0] += f", {load(conditions.get('load_end'))} at end"
    share = conditions.get("cpu_share_pct")
    if share is not None:
        parts.append(
            f"CPU share {share:.0f} % of one core ({conditions.get('cpu_s', 0):.1f} s CPU in "
            f"{conditions.get('wall_s', 0):.1f} s; {conditions.get('cpus')} cores)"
        )
    if conditions.get("torch_threads") is not None:
        parts.append(f"torch threads {conditions['torch_threads']}")
    parts.append(f"nice {conditions.get('nice')}")
    return " · ".join(parts)
