"""Calibration as a checked step: bad timings injected into the bound checks, the fitted
slope and the cache are refused with a readable reason, never turned into a prediction."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import torch

from lab.labs import calibration
from lab.labs.calibration import CalibrationError, DeviceConstants
from lab.labs.kv_vs_no_cache import fit_slope

pytestmark = pytest.mark.usefixtures("one_thread")


def constants(**over) -> DeviceConstants:
    base = DeviceConstants(
        device="CPU: test", dtype="float32", threads=1, torch_version=torch.__version__,
        buffer_bytes=1 << 25, bandwidth_bytes_s=30e9, bandwidth_median_bytes_s=28e9,
        flop_s=50e9, flop_median_s=45e9, gemm_size=512, dispatch_s=4e-6,
        measured_at=1_000_000.0, load_avg=0.5, matvec_bytes_s=15e9, matvec_median_bytes_s=14e9,
    )  # fmt: skip
    return replace(base, **over)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("bandwidth_bytes_s", 5e12, "read bandwidth"),  # 5,000 GB/s on a CPU: not memory
        ("bandwidth_bytes_s", 1e8, "read bandwidth"),
        ("flop_s", 2.87e18, "matmul FLOP/s"),  # the 2.87e9 GFLOP/s of issue 21
        ("flop_s", 1e7, "matmul FLOP/s"),
        ("flop_s", float("nan"), "matmul FLOP/s"),
        ("dispatch_s", 0.5, "per-kernel overhead"),
        ("matvec_bytes_s", 0.0, "matrix-vector weight streaming rate"),  # an old cache entry
    ],
)
def test_out_of_bounds_constants_are_refused_with_the_reason(field, value, words):
    with pytest.raises(CalibrationError) as err:
        calibration.check(constants(**{field: value}))
    assert words in str(err.value) and "outside the physical range" in str(err.value)
    assert "run again" in str(err.value)


def test_physical_constants_pass():
    good = constants()
    assert calibration.check(good) is good


@pytest.mark.parametrize("slope", [0.0, -3e-12, 1e-9 / 1e12, float("inf")])
def test_a_non_positive_or_absurd_slope_is_refused_never_clamped(slope):
    # a decreasing time with FLOPs (a loaded machine) used to become 1e-9 s -> 2.87e9 GFLOP/s
    with pytest.raises(CalibrationError):
        calibration.fitted_rate(slope, "cpu", "no-cache forward slope")


def test_fitted_slope_from_injected_timings():
    flops = [1e9, 3e9, 5e9, 8e9]
    # the warm-up outlier of a loaded machine: the shortest input timed slowest
    assert fit_slope(flops, [0.9, 0.05, 0.08, 0.12]) < 0
    with pytest.raises(CalibrationError):
        calibration.fitted_rate(fit_slope(flops, [0.9, 0.05, 0.08, 0.12]))
    # clean timings: 20 GFLOP/s plus a fixed 2 ms
    times = [0.002 + f / 20e9 for f in flops]
    assert calibration.fitted_rate(fit_slope(flops, times)) == pytest.approx(20e9)


def test_cache_is_used_when_fresh_and_measured_again_when_old_or_bad(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    measured = []

    def fake_measure(device, dtype, read_bytes):
        measured.append(read_bytes)
        return constants(measured_at=2_000_000.0)

    monkeypatch.setattr(calibration, "measure", fake_measure)
    key = calibration.cache_key("cpu", torch.float32, 20_000_000)
    path.write_text(json.dumps({key: asdict(constants(measured_at=1_990_000.0))}))
    got = calibration.constants_for("cpu", torch.float32, 20_000_000, path=path, now=2_000_000)
    assert got.measured_at == 1_990_000.0 and not measured  # < 24 h old: the cache
    calibration.constants_for("cpu", torch.float32, 20_000_000, path=path,
                              now=1_990_000 + 25 * 3600)  # fmt: skip
    assert measured == [20_000_000]  # > 24 h old: measured again, and stored
    assert json.loads(path.read_text())[key]["measured_at"] == 2_000_000.0
    path.write_text(json.dumps({key: asdict(constants(flop_s=1e20, measured_at=2_000_000.0))}))
    got = calibration.constants_for("cpu", torch.float32, 20_000_000, path=path, now=2_000_000)
    assert got.flop_s == 50e9 and len(measured) == 2  # an absurd cached value is not used
    path.write_text("{half a file")
    calibration.constants_for("cpu", torch.float32, 20_000_000, path=path, now=2_000_000)
    assert len(measured) == 3


def test_bandwidth_buffer_is_sized_like_the_step_reads():
    # the bundled target's ~17 MB of fp32 weights: measured on 32 MiB, not a cached 1 MiB
    assert calibration.size_class(17_000_000) == 1 << 25
    assert calibration.size_class(10) == 1 << 20
    assert calibration.cache_key("cpu", torch.float32, 17_000_000) != calibration.cache_key(
        "cpu", torch.float32, 1_000_000
    )


def test_measure_on_this_cpu_is_physical_and_says_what_it_used():
    c = calibration.measure("cpu", torch.float32, 4 << 20)
    assert c.buffer_bytes == 4 << 20 and c.threads == 1
    assert c.bandwidth_median_bytes_s <= c.bandwidth_bytes_s  # best is the ceiling
    line = c.describe(now=c.measured_at)
    assert "GB/s (4 MiB buffer)" in line and "GFLOP/s" in line and "0 min ago" in line
    # what a prediction does not use is marked as such, never shown as if it were used
    assert "not used by this prediction: " in line and "per kernel" in line.split("not used")[1]
    only_bw = c.describe(now=c.measured_at, uses=("bandwidth",))
    assert "GFLOP/s" in only_bw.split("not used")[1] and "GB/s" in only_bw.split("not used")[0]


def test_constants_measured_under_contention_expire_in_minutes(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setattr(calibration, "measure", lambda *a: constants(measured_at=3_000_000.0))
    key = calibration.cache_key("cpu", torch.float32, 1 << 20)
    busy = constants(load_avg=50.0, measured_at=2_990_000.0)
    path.write_text(json.dumps({key: asdict(busy)}))
    got = calibration.constants_for("cpu", torch.float32, 1 << 20, path=path,
                                    now=2_990_000 + 3600)  # fmt: skip
    assert got.measured_at == 3_000_000.0  # an hour old and measured at load 50: again


def test_round_robin_takes_turns_after_discarded_warmup_rounds():
    calls: list[str] = []
    times = calibration.round_robin(
        [lambda: calls.append("a"), lambda: calls.append("b")], "cpu", repeats=3, warmup=2
    )
    assert calls == ["a", "b"] * 5  # 2 warm-up rounds, then 3 timed, in turns
    assert [len(t) for t in times] == [3, 3] and all(x >= 0 for t in times for x in t)
