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
        # the run's conditions, as a lab run records them (item 4 of issue 31)
        assert len(r["load_start"]) == 3 and r["cpu_share_pct"] > 0 and "contended" in r


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
    assert lines[2] == "| a | s | exact | — | 1 | 1 |  | held | matched exactly |"
    assert lines[3] == "| b | t | estimate | ±25% | 1.31 | 1.6 |  | missed | missed: … |"
    assert lines[4] == "| c | (run) |  |  | — | — |  | error | CalibrationError: … |"
    bound = {"lab": "d", "series": "r", "claim": "bound", "band": 0.2, "median": 1.4,
             "worst": 1.1, "status": "held", "verdict": "held: …", "tightness": "tight",
             "tight_expected": True}  # fmt: skip
    assert "| tight (marked tight) | held |" in check_predictions.table([bound])


def test_an_unknown_lab_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        check_predictions.main(["--labs", "kv-growth"])
    assert "unknown lab(s) kv-growth" in capsys.readouterr().err


def test_a_bound_marked_tight_that_comes_out_loose_fails(monkeypatch):
    from lab.labs import two_phase
    from lab.labs.base import Point

    def loose_run(self, ctx):  # the bound 5x below every measured step
        for x in (1, 2, 4):
            yield Point("decode-roofline", x, 1.0)
            yield Point("decode", x, 5.0, {"predicted": 1.0})
            yield Point("prefill-roofline", x * 16, 1.0)
            yield Point("prefill", x * 16, 1.5, {"predicted": 1.0})

    monkeypatch.setattr(two_phase.TwoPhase, "run", loose_run)
    monkeypatch.setattr("lab.labs.verdicts.contention", lambda record: "")  # a quiet machine
    rows = {r["series"]: r for r in check_predictions.check_lab("two-phase")}
    decode, prefill = rows["decode-roofline"], rows["prefill-roofline"]
    assert decode["tight_expected"] and decode["tightness"] == "loose"
    assert decode["status"] == "missed" and "marked tight (docs/LABS.md)" in decode["verdict"]
    assert (prefill["tightness"], prefill["status"]) == ("tight", "held")
    # under contention slowed steps read loose: inconclusive, with the reason, not a pass
    busy = "load average 4.00 on 2 cores"
    monkeypatch.setattr("lab.labs.verdicts.contention", lambda record: busy)
    decode = {r["series"]: r for r in check_predictions.check_lab("two-phase")}["decode-roofline"]
    assert decode["status"] == "inconclusive" and busy in decode["verdict"]


def test_a_failed_check_under_contention_is_run_again_and_both_runs_are_reported():
    runs = iter([
        [{"series": "s", "status": "missed", "contended": "load average 4.00 on 2 cores"}],
        [{"series": "s", "status": "held", "contended": ""}],
    ])  # fmt: skip
    rows = check_predictions.check_with_rerun("x", check=lambda slug: next(runs))
    assert [r["run"] for r in rows] == ["first run", "rerun"]
    assert rows[0]["status"].startswith("missed (first run, contended: load average 4.00")
    assert rows[1]["status"] == "held"
    quiet = [{"series": "s", "status": "missed", "contended": ""}]
    assert check_predictions.check_with_rerun("x", check=lambda slug: quiet) == quiet  # no rerun


def test_labs_md_lists_exactly_the_bounds_marked_tight():
    import re
    from pathlib import Path

    from lab.labs import LABS

    marked = {(slug, s.name) for slug, lab in LABS.items() for s in lab.series if s.tight}
    text = (Path(__file__).resolve().parents[2] / "docs" / "LABS.md").read_text()
    section = text.split("## Bounds marked tight", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| ([a-z0-9-]+) \| ([a-z0-9-]+) \|", section, re.M))
    listed.discard(("lab", "series"))  # the header row
    assert listed == marked and marked
