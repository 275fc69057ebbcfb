"""The device constants behind the labs' predictions, measured and checked before use.

Per (device name, dtype, torch threads, torch version) and read-buffer size class, a worker
measures after warm-up: read bandwidth on a buffer as large as the bytes the predicted step
reads (a small buffer measures the cache, not memory), the rate a one-row matrix-vector
product streams weights of that size in the lab's dtype (what a decode step at batch 1 can
reach: one CPU core's matmul kernel reads well below its plain read rate, ~15 against 42
GB/s on a 2-core AMD EPYC in bf16), GEMM FLOP/s and the per-kernel
framework overhead (one tiny op's dispatch). Each is the best of several repeats (a rate
ceiling, as a roofline needs) with its median kept beside it. A value outside physical
bounds raises `CalibrationError`: a run then fails with that sentence and never draws a
prediction from it. `fitted_rate` applies the same bounds to a lab's own fitted slope.

Values are cached in a JSON file (the worker passes one under VAR_DIR) and measured again
when missing or older than MAX_AGE_S. No Django here: labs run the same in a test or shell.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from lab.engine import jsonfile
from lab.labs.common import device_name, timed

MAX_AGE_S = 24 * 3600
# Constants measured under contention (load average above the cores) are slow: a later quiet
# run would then "beat" a bound drawn from them. They are used for 10 minutes only.
CONTENDED_MAX_AGE_S = 600
REPEATS = 5  # timings per constant after warm-up; the best is the ceiling, the median kept
WARMUP = 2  # discarded calls before timing (page faults, kernel selection, caches)
# Physical bounds by device type: (low, high) in bytes/s, FLOP/s and seconds per kernel.
BOUNDS = {
    "cpu": {"bandwidth_bytes_s": (1e9, 1e12), "matvec_bytes_s": (1e8, 1e12),
            "flop_s": (1e8, 1e16), "dispatch_s": (1e-8, 1e-2)},
    "cuda": {"bandwidth_bytes_s": (1e10, 1e14), "matvec_bytes_s": (1e9, 1e14),
             "flop_s": (1e10, 1e16), "dispatch_s": (1e-8, 1e-2)},
}  # fmt: skip
UNITS = {"bandwidth_bytes_s": "bytes/s", "matvec_bytes_s": "bytes/s", "flop_s": "FLOP/s",
         "dispatch_s": "s"}  # fmt: skip
NAMES = {
    "bandwidth_bytes_s": "read bandwidth",
    "matvec_bytes_s": "matrix-vector weight streaming rate",
    "flop_s": "matmul FLOP/s",
    "dispatch_s": "per-kernel overhead",
}


class CalibrationError(RuntimeError):
    """A measured or fitted device constant outside physical bounds: no prediction is drawn."""


@dataclass(frozen=True)
class DeviceConstants:
    """What one device measured: rates are best-of-repeats ceilings, `*_median` beside them."""

    device: str
    dtype: str
    threads: int
    torch_version: str
    buffer_bytes: int  # the read-bandwidth buffer (rounded up to a power of two)
    bandwidth_bytes_s: float
    bandwidth_median_bytes_s: float
    flop_s: float
    flop_median_s: float
    gemm_size: int
    dispatch_s: float
    measured_at: float  # epoch seconds
    load_avg: float  # 1-minute load average when measured
    matvec_bytes_s: float = 0.0  # one-row matmul over weight-sized matrices (0: not measured)
    matvec_median_bytes_s: float = 0.0

    def describe(self, now: float | None = None,
                 uses: tuple[str, ...] = ("bandwidth", "flop")) -> str:  # fmt: skip
        """One line for a chart: which constants a prediction used (`uses`: bandwidth, flop,
        dispatch), the others marked as measured but unused, and how old they are."""
        age_min = max(0.0, ((now or time.time()) - self.measured_at) / 60)
        parts = {
            "bandwidth": f"read {self.bandwidth_bytes_s / 1e9:.1f} GB/s "
                         f"({self.buffer_bytes / 2**20:.0f} MiB buffer)",
            "matvec": f"matrix-vector {self.matvec_bytes_s / 1e9:.1f} GB/s",
            "flop": f"matmul {self.flop_s / 1e9:.1f} GFLOP/s (n={self.gemm_size})",
            "dispatch": f"{self.dispatch_s * 1e6:.1f} µs per kernel",
        }  # fmt: skip
        used = [text for name, text in parts.items() if name in uses]
        unused = [text for name, text in parts.items() if name not in uses]
        line = f"{self.dtype} on {self.device}, torch {self.torch_version}: {', '.join(used)}"
        if unused:
            line += f" (measured, not used by this prediction: {', '.join(unused)})"
        return f"{line}; measured {age_min:.0f} min ago at load {self.load_avg:.2f}"


def check_value(name: str, value: float, device_type: str = "cpu", what: str = "") -> float:
    """`value` if inside BOUNDS[device_type][name]; CalibrationError saying why otherwise."""
    low, high = BOUNDS.get(device_type, BOUNDS["cpu"])[name]
    if not (math.isfinite(value) and low <= value <= high):
        label = what or NAMES[name]
        raise CalibrationError(
            f"The {label} measured on this {device_type.upper()} is {value:.3g} {UNITS[name]}, "
            f"outside the physical range {low:.0e}–{high:.0e} {UNITS[name]}, so no prediction "
            "is drawn from it. The machine was probably overloaded or the timing was "
            "disturbed; run again on a quieter machine."
        )
    return value


def check(constants: DeviceConstants, device_type: str = "cpu") -> DeviceConstants:
    """`constants` if every value is physical; CalibrationError naming the first that is not."""
    for name in ("bandwidth_bytes_s", "matvec_bytes_s", "flop_s", "dispatch_s"):
        check_value(name, getattr(constants, name), device_type)
    return constants


def fitted_rate(seconds_per_unit: float, device_type: str = "cpu", what: str = "") -> float:
    """FLOP/s implied by a fitted slope in seconds per FLOP, bound-checked like a measured
    one. A slope ≤ 0 (the longer input timed faster: contention or noise) is refused, never
    clamped: a 1e-9 floor once turned into 2.87e9 GFLOP/s and a flat prediction."""
    if not (math.isfinite(seconds_per_unit) and seconds_per_unit > 0):
        raise CalibrationError(
            f"The fitted {what or 'compute slope'} is {seconds_per_unit:.3g} s per FLOP: the "
            "longer input did not take longer, so the timings were disturbed (another process "
            "took the CPU). No prediction is drawn; run again on a quieter machine."
        )
    return check_value("flop_s", 1.0 / seconds_per_unit, device_type, what or "fitted FLOP/s")


def positive_cost(ms: float, what: str, symptom: str) -> float:
    """A fitted cost in ms that must be positive (a fixed cost per step, a cost per
    sequence), or CalibrationError saying what the timings showed instead (never clamped)."""
    if not (math.isfinite(ms) and ms > 0):
        raise CalibrationError(
            f"The fitted {what} is {ms:.3g} ms (it must be positive): {symptom}, so the "
            "timings were disturbed. No prediction is drawn; run again on a quieter machine."
        )
    return ms


def size_class(num_bytes: int) -> int:
    """The buffer size a read-bandwidth figure is measured (and cached) for: the next power
    of two, at least 1 MiB."""
    return max(1 << 20, 1 << math.ceil(math.log2(max(num_bytes, 1))))


def repeat(fn: Callable[[], object], device: str, repeats: int = REPEATS,
           warmup: int = WARMUP) -> list[float]:  # fmt: skip
    """Seconds of `repeats` calls of `fn`, after `warmup` discarded ones."""
    for _ in range(warmup):
        timed(fn, device)
    return [timed(fn, device)[0] for _ in range(repeats)]


def round_robin(fns: list[Callable[[], object]], device: str, repeats: int = REPEATS,
                warmup: int = WARMUP) -> list[list[float]]:  # fmt: skip
    """Seconds of `repeats` calls of each of `fns`, taken in turns (fn 1, fn 2, …, fn 1, …)
    after `warmup` discarded rounds, so a burst of load from another process lands on every
    fn alike instead of bending a fit through one of them."""
    for _ in range(warmup):
        for fn in fns:
            timed(fn, device)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            times[i].append(timed(fn, device)[0])
    return times


def _measure_bandwidth(num_bytes: int, device: str) -> tuple[float, float]:
    buf = torch.ones(max(num_bytes // 4, 1), dtype=torch.float32, device=device)
    times = repeat(buf.sum, device)
    return buf.numel() * 4 / min(times), buf.numel() * 4 / statistics.median(times)


def _measure_matvec(num_bytes: int, device: str, dtype: torch.dtype) -> tuple[float, float]:
    """Bytes/s a one-row product streams `num_bytes` of weights through the engine's own
    kernel choice (lab.engine.model.linear), 4096 x 1024 matrices at a time."""
    from torch import nn

    from lab.engine.model import linear

    per = 4096 * 1024 * torch.empty(0, dtype=dtype).element_size()
    layers = [nn.Linear(1024, 4096, bias=False).to(device=device, dtype=dtype)
              for _ in range(max(1, num_bytes // per))]  # fmt: skip
    x = torch.randn(1, 1024, device=device).to(dtype)
    total = per * len(layers)
    times = repeat(lambda: [linear(m, x) for m in layers], device)
    return total / min(times), total / statistics.median(times)


def _measure_gemm(device: str, dtype: torch.dtype, n: int) -> tuple[float, float]:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    times = repeat(lambda: a @ b, device)
    return 2 * n**3 / min(times), 2 * n**3 / statistics.median(times)


def _measure_dispatch(device: str) -> float:
    x = torch.ones(8, device=device)
    ops = 200
    times = repeat(lambda: [x.add(1.0) for _ in range(ops)], device)
    return min(times) / ops


def _loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def measure(device: str, dtype: torch.dtype, read_bytes: int) -> DeviceConstants:
    """Measure this device now (a second or two on a CPU) and check the result."""
    kind = torch.device(device).type
    buffer_bytes = size_class(read_bytes)
    gemm = 4096 if kind == "cuda" else 512
    bw, bw_median = _measure_bandwidth(buffer_bytes, device)
    with torch.no_grad():
        mv, mv_median = _measure_matvec(buffer_bytes, device, dtype)
    flop_s, flop_median = _measure_gemm(device, dtype, gemm)
    constants = DeviceConstants(
        device=device_name(device), dtype=str(dtype).removeprefix("torch."),
        threads=torch.get_num_threads(), torch_version=torch.__version__,
        buffer_bytes=buffer_bytes, bandwidth_bytes_s=bw, bandwidth_median_bytes_s=bw_median,
        flop_s=flop_s, flop_median_s=flop_median, gemm_size=gemm,
        dispatch_s=_measure_dispatch(device), measured_at=time.time(), load_avg=_loadavg(),
        matvec_bytes_s=mv, matvec_median_bytes_s=mv_median,
    )  # fmt: skip
    return check(constants, kind)


def cache_key(device: str, dtype: torch.dtype, read_bytes: int) -> str:
    return " | ".join((device_name(device), str(dtype).removeprefix("torch."),
                       f"{torch.get_num_threads()} threads", f"torch {torch.__version__}",
                       f"{size_class(read_bytes)} B"))  # fmt: skip


_MEMO: dict[str, DeviceConstants] = {}


def _max_age(constants: DeviceConstants, max_age_s: float) -> float:
    contended = constants.load_avg > (os.cpu_count() or 1) + 0.5
    return min(max_age_s, CONTENDED_MAX_AGE_S) if contended else max_age_s


def constants_for(device: str, dtype: torch.dtype, read_bytes: int, *,
                  path: Path | None = None, max_age_s: float = MAX_AGE_S,
                  now: float | None = None) -> DeviceConstants:  # fmt: skip
    """Cached constants for this device and read size, measured when missing or older than
    `max_age_s`; a cached entry is checked again (a file may be edited or corrupt)."""
    key, now = cache_key(device, dtype, read_bytes), now or time.time()
    kind = torch.device(device).type
    entries = jsonfile.read(path) if path else {k: asdict(v) for k, v in _MEMO.items()}
    if key in entries:
        try:
            cached = DeviceConstants(**entries[key])
        except TypeError:  # a file from an older layout
            cached = None
        if cached and now - cached.measured_at <= _max_age(cached, max_age_s):
            try:
                return check(cached, kind)
            except CalibrationError:  # an edited or corrupt entry: measure again
                pass
    fresh = measure(device, dtype, read_bytes)
    _MEMO[key] = fresh
    if path:
        jsonfile.write(path, {**jsonfile.read(path), key: asdict(fresh)})
    return fresh
