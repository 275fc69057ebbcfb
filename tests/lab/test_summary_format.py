"""Summary numbers with their units (lab/summary_format.py)."""

from __future__ import annotations

from lab.summary_format import constants_line, live_summary, number, summary_rows, unit_for


def test_units_come_from_the_key_suffix():
    assert unit_for("ttft_ms_longest_prompt") == "ms"
    assert unit_for("cached_decode_total_ms_predicted") == "ms"
    assert unit_for("read_bandwidth_gb_s") == "GB/s"
    assert unit_for("calibrated_gflop_s") == "GFLOP/s"
    assert unit_for("prefill_tokens_per_s") == "tok/s"
    assert unit_for("weight_mb") == "MB"
    assert unit_for("wall_s") == "s"
    assert unit_for("total_time_ratio_none_over_cached") == "×"


def test_numbers_are_rounded_for_reading():
    assert number(0.30000000000000004) == "0.3"
    assert number(12.345678) == "12.3"
    assert number(41234.56) == "41,235"
    assert number(1234567) == "1,234,567"
    assert number(3.14159) == "3.14"


def test_rows_skip_verdicts_and_keep_text():
    rows = summary_rows({"weight_mb": 17.3, "constants": "read 27.9 GB/s", "verdicts": [1],
                         "speedup_ratio": 2.0})  # fmt: skip
    assert rows == [["weight mb", "17.3 MB"], ["constants", "read 27.9 GB/s"],
                    ["speedup ratio", "2×"]]  # fmt: skip


def test_the_constants_line_joins_what_the_prediction_used():
    assert constants_line(None) == "" and constants_line({"ratio": 1.0}) == ""
    summary = {"constants": "fp32 on CPU: read 30 GB/s", "calibration": "fitted 50 GFLOP/s",
               "warmup": "discarded", "ratio": 2.0}  # fmt: skip
    assert constants_line(summary) == "fp32 on CPU: read 30 GB/s · fitted 50 GFLOP/s"
    assert live_summary(summary) == {k: summary[k] for k in ("constants", "calibration",
                                                             "warmup")}  # fmt: skip
