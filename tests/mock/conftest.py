"""Fixtures for the mock-interview tests: the bank, three users, a fast stand-in grader."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from trainer.grading import rubric

PASSWORD = "prefill-then-decode"
WARM_UP = "inference-warm-up"


@pytest.fixture
def bank():
    call_command("load_bank", verbosity=0)


@pytest.fixture
def ada(bank):
    return get_user_model().objects.create_user("ada", password=PASSWORD)


@pytest.fixture
def bob(bank):
    return get_user_model().objects.create_user("bob", password=PASSWORD)


@pytest.fixture
def cy(bank):
    return get_user_model().objects.create_user("cy", password=PASSWORD)


@pytest.fixture
def fast_grader(monkeypatch):
    """Grades without the sentence model: each point is hit when its first concept (or
    first word) appears in the answer. The real grader has its own tests."""

    def grade(answer, points, prompt=""):
        results = []
        for i, p in enumerate(points):
            key = (p.concepts[0] if p.concepts else p.text.split()[0]).lower()
            hit = bool(answer.strip()) and key in answer.lower()
            results.append(
                rubric.PointResult(
                    i, hit, 0.9 if hit else 0.1, (), answer[:40] if hit else "", p.penalty, p.weight
                )
            )
        earnable = sum(p.weight for p in points if not p.penalty) or 1
        score = sum(r.weight for r in results if r.hit and not r.penalty) / earnable
        return rubric.RubricResult(score, tuple(results), 0.5)

    monkeypatch.setattr(rubric, "grade", grade)
    return grade
