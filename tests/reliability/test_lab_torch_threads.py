"""Torch threads in a lab worker's prefork pool process: the worker's CPUs shared among the
runs it executes at once (torch's default, every CPU in every pool process, oversubscribes
the cores: bench.web saw a lab 9x slower and a healthy run reaped for missed heartbeats).
OMP_NUM_THREADS set by the operator wins."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lab import tasks


@pytest.fixture
def restore(monkeypatch):
    threads, node = torch.get_num_threads(), dict(tasks._NODE)
    yield monkeypatch
    torch.set_num_threads(threads)
    tasks._NODE.update(node)


@pytest.mark.parametrize(
    ("cpus", "concurrency", "threads"), [(4, 2, 2), (2, 2, 1), (2, 3, 1), (8, 1, 8), (2, "auto", 1)]
)
def test_each_run_gets_its_share_of_the_cpus(restore, cpus, concurrency, threads):
    restore.delenv("OMP_NUM_THREADS", raising=False)
    restore.setattr(tasks.os, "cpu_count", lambda: cpus)
    # What the worker_init signal hands over: the worker (its concurrency may be "auto").
    tasks._remember_node_name(SimpleNamespace(hostname="lab@node", concurrency=concurrency))
    assert tasks.torch_threads() == threads
    tasks._limit_threads()
    assert torch.get_num_threads() == threads


def test_omp_num_threads_set_by_the_operator_is_kept(restore):
    restore.setenv("OMP_NUM_THREADS", "3")
    restore.setattr(tasks.os, "cpu_count", lambda: 8)
    torch.set_num_threads(3)
    tasks._remember_node_name(SimpleNamespace(hostname="lab@node", concurrency=8))
    tasks._limit_threads()
    assert torch.get_num_threads() == 3
