"""Fixtures shared by the lab tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Tiny models are overhead-bound: extra threads only contend on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
