"""bench.gpu_check: the logits check passes on our model, fails on a perturbed copy, and
says plainly (exit 2) when there is no CUDA device. The GPU run itself skips without CUDA."""

from __future__ import annotations

import pytest
import torch

from bench import gpu_check


@pytest.fixture(autouse=True)
def one_thread():
    """Small models: a second intra-op thread only adds waiting on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_logits_match_transformers_on_cpu(capsys):
    assert gpu_check.main(["--device", "cpu", "--no-bench"]) == 0
    out = capsys.readouterr().out
    assert "4/4 logits checks passed" in out
    assert out.count("| ok |") == 4  # fp32 and bf16, whole sequences and KV-cached decode


def test_a_perturbed_model_fails_the_check(capsys):
    assert gpu_check.main(["--device", "cpu", "--no-bench", "--perturb", "0.01"]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out


def test_checks_report_diff_and_argmax():
    checks, label = gpu_check.logits_checks("cpu")
    assert {(c.dtype, c.path) for c in checks} == {
        (d, p) for d in ("float32", "bfloat16") for p in ("whole sequences", "KV-cached decode")
    }
    fp32 = [c for c in checks if c.dtype == "float32"]
    assert all(c.max_abs_diff < 1e-3 and c.argmax_agree == 1.0 for c in fp32)
    assert label


def test_without_cuda_it_says_so_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == gpu_check.NO_CUDA_EXIT == 2
    assert "--device cpu" in capsys.readouterr().out


def test_on_cuda_the_logits_match():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine; `make bench-gpu` runs the full check on one")
    assert gpu_check.main(["--device", "cuda", "--no-bench"]) == 0
