"""`python -m lab.check_predictions`: one row per predicted series with its claim, band and
verdict, exit 1 only when a verdict missed; an unknown lab is refused by name."""

from __future__ import annotations

import json

import pytest

from lab import check_predictions

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_small_exact_lab_is_judged_row_by_row(capsys):
    assert check_predictions.main(["--labs", "kv-cache-growth", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["series"] for r in rows} == {"mha-predicted", "gqa-predicted"}
    for r in rows:
        assert r["lab"] == "kv-cache-growth" and r["claim"] == "exact"
        assert r["status"] == "held" and r["verdict"] == "matched exactly"
        assert r["threads"] == 1 and r["points"] > 0


def test_the_table_says_what_each_claim_allows():
    rows = [
        {"lab": "a", "series": "s", "claim": "exact", "band": 0, "median": 1.0, "worst": 1.0,
         "status": "held", "verdict": "matched exactly"},
        {"lab": "b", "series": "t", "claim": "estimate", "band": 0.25, "median": 1.31,
         "worst": 1.6, "status": "missed", "verdict": "missed: …"},
        {"lab": "c", "series": "(run)", "claim": "", "band": None, "median": None,
         "worst": None, "status": "error", "verdict": "CalibrationError: …"},
    ]  # fmt: skip
    lines = check_predictions.table(rows).splitlines()
    assert lines[2] == "| a | s | exact | — | 1 | 1 | held | matched exactly |"
    assert lines[3] == "| b | t | estimate | ±25% | 1.31 | 1.6 | missed | missed: … |"
    assert lines[4] == "| c | (run) |  |  | — | — | error | CalibrationError: … |"


def test_an_unknown_lab_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        check_predictions.main(["--labs", "kv-growth"])
    assert "unknown lab(s) kv-growth" in capsys.readouterr().err
