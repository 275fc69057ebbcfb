"""The engine's dtype is chosen by measuring (issue 31): the fastest candidate that passes the
logits check, cached per machine; an explicit dtype wins."""

from __future__ import annotations

import json

import pytest
import torch

from lab.engine import dtypes


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    """Each test starts with nothing measured in this process."""
    monkeypatch.setattr(dtypes, "_MEMO", {})


def fake(times: dict[str, float]):
    calls: list[str] = []

    def measure(name: str, shape=None) -> float:
        calls.append(name)
        return times[name]

    return measure, calls


def passes(name: str, shape=None) -> str:
    return ""


def test_the_choice_follows_the_measurement():
    measure, _ = fake({"fp32": 3.0, "bf16": 5.5, "fp16": 9.0})
    choice = dtypes.choose(measure=measure, check=passes)
    assert (choice.dtype, choice.why) == ("fp32", "measured")
    assert dtypes.choose(measure=measure, check=passes).why == "cached"  # once per process
    dtypes._MEMO.clear()
    measure, _ = fake({"fp32": 6.0, "bf16": 2.5, "fp16": 9.0})
    choice = dtypes.choose(measure=measure, check=passes)
    assert choice.dtype == "bf16"
    assert choice.step_ms == {"fp32": 6.0, "bf16": 2.5, "fp16": 9.0}
    assert "bf16: fastest correct dtype" in choice.describe() and "2.5 ms" in choice.describe()


def test_a_dtype_that_fails_the_logits_check_is_never_chosen_or_timed():
    measure, calls = fake({"fp32": 6.0, "bf16": 2.5, "fp16": 1.0})

    def check(name: str, shape=None) -> str:
        return "top-1 agrees with fp32 on 40% of positions (< 90%)" if name == "fp16" else ""

    choice = dtypes.choose(measure=measure, check=check)
    assert choice.dtype == "bf16"
    assert "fp16" not in calls and "fp16" in choice.failed
    assert "fp16 refused: top-1 agrees" in choice.describe()


def test_an_explicit_dtype_wins_and_an_unknown_one_is_refused():
    measure, calls = fake({"fp32": 1.0, "bf16": 9.0, "fp16": 9.0})
    choice = dtypes.choose(explicit="bf16", measure=measure, check=passes)
    assert (choice.dtype, choice.why, calls) == ("bf16", "explicit", [])
    assert choice.describe() == "bf16: set explicitly"
    with pytest.raises(ValueError, match="Unknown dtype 'int3'"):
        dtypes.choose(explicit="int3")


def test_the_measurement_is_cached_per_machine_and_measured_again_when_stale(tmp_path):
    path = tmp_path / "engine_dtype.json"
    measure, calls = fake({"fp32": 6.0, "bf16": 2.5, "fp16": 9.0})
    first = dtypes.choose(path=path, measure=measure, check=passes, now=1000.0)
    dtypes._MEMO.clear()  # another process: the file remembers
    again = dtypes.choose(path=path, measure=measure, check=passes, now=2000.0)
    assert (first.why, again.why, again.dtype) == ("measured", "cached", "bf16")
    assert calls == ["fp32", "bf16", "fp16"]  # measured once
    assert any(dtypes.machine_key() in k for k in json.loads(path.read_text()))
    later = 1000.0 + dtypes.MAX_AGE_S + 1
    assert dtypes.choose(path=path, measure=measure, check=passes, now=later).why == "measured"


def test_a_cached_choice_that_names_a_refused_dtype_is_measured_again(tmp_path):
    path = tmp_path / "engine_dtype.json"
    key = f"{dtypes.machine_key()} | {dtypes.shape_key(dtypes.probe_shape())} | {dtypes.PROBE}"
    path.write_text(json.dumps({key: {"dtype": "fp16", "why": "measured", "machine": key,
                                      "step_ms": {}, "failed": {"fp16": "non-finite logits"},
                                      "measured_at": 1000.0}}))  # fmt: skip
    measure, _ = fake({"fp32": 6.0, "bf16": 2.5, "fp16": 1.0})
    choice = dtypes.choose(path=path, measure=measure, check=passes, now=1001.0)
    assert (choice.dtype, choice.why) == ("fp16", "measured")  # a fresh, passing measurement


def test_the_real_logits_check_passes_bf16_and_refuses_a_broken_dtype(monkeypatch):
    shape = dict(dtypes.probe_shape(llc_bytes=1 << 20), num_hidden_layers=2)
    assert dtypes.logits_check("fp32", shape) == ""
    assert dtypes.logits_check("bf16", shape) == ""
    real = dtypes._probe

    def broken(shape, dtype, seed=0):  # a dtype whose kernels return garbage
        model = real(shape, dtype, seed)
        if dtype == torch.float16:
            with torch.no_grad():
                model.lm_head.weight.mul_(float("inf"))
        return model

    monkeypatch.setattr(dtypes, "_probe", broken)
    assert dtypes.logits_check("fp16", shape) == "non-finite logits"


def test_the_probe_leaves_the_last_level_cache():
    shape = dtypes.probe_shape(llc_bytes=32 << 20)
    per_layer = 4 * (2 * 1024 * 1024 + 2 * 1024 * 256 + 3 * 1024 * 2816)
    assert shape["num_hidden_layers"] * per_layer >= 4 * (32 << 20)
    assert dtypes.last_level_cache_bytes() > 0


def test_the_last_level_cache_is_read_from_sys_and_defaults_when_absent(tmp_path):
    for index, size in (("index0", "48K"), ("index2", "1024K"), ("index3", "32768K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(f"{size}\n")
    assert dtypes.last_level_cache_bytes(tmp_path) == 32 << 20
    assert dtypes.last_level_cache_bytes(tmp_path / "missing") == 32 << 20  # the default
    (tmp_path / "index3" / "size").write_text("256M\n")
    assert dtypes.last_level_cache_bytes(tmp_path) == 256 << 20
