"""Fixtures shared by the grader's regression tests on the bank's own questions."""

from __future__ import annotations

import pytest

from bench.rubric_calibration import bank_points


@pytest.fixture(scope="session")
def bank():
    """Every published question's rubric points and prompt, read once per test run."""
    return bank_points()
