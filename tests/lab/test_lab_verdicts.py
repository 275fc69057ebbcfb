"""Verdicts per predicted series, fed the bad timings of issue 21: a measured prefill
beating its own lower bound, a warm-up outlier, a flat prediction under a climbing
measurement, and contention stated instead of failing."""

from __future__ import annotations

from lab.labs.base import Lab, Point, Series
from lab.labs.verdicts import contention, judge, judge_run, pairs

BOUND = Series("prefill-roofline", "lower bound", "predicted", predicts="prefill",
               claim="bound", band=0.2)  # fmt: skip
ESTIMATE = Series("none-predicted", "estimate", "predicted", predicts="none",
                  claim="estimate", band=0.25)  # fmt: skip
EXACT = Series("bytes-predicted", "exact", "predicted", predicts="bytes", claim="exact")


def test_measured_beating_a_lower_bound_is_a_bug_not_a_lesson():
    # issue 21: fraction of bound 1.99 -> the measured prefill took half the bound
    v = judge(BOUND, [(16, 1.0, 0.9), (512, 10.0, 19.9)])
    assert v.status == "missed"
    assert "measured beat the bound by 1.99× at x=512" in v.text
    assert "a bug in the model" in v.text and "likely cause" in v.text


def test_a_bound_held_within_noise():
    v = judge(BOUND, [(16, 1.0, 1.1), (512, 30.0, 20.0)])  # 1.1 = 10 % past: noise
    assert v.status == "held" and "held" in v.text


def test_an_upper_bound_is_judged_from_the_other_side():
    ceiling = Series("abort-predicted", "at most", "predicted", predicts="abort",
                     claim="bound", bound_side="upper")  # fmt: skip
    assert judge(ceiling, [(1, 3, 4)]).status == "held"
    assert judge(ceiling, [(1, 8, 4)]).status == "missed"


def test_a_flat_estimate_under_a_climbing_measurement_misses():
    # issue 21: predicted flat at 5.27 ms while measured climbs to ~50 ms
    rows = [(x, 5 + 0.1 * x, 5.27) for x in range(16, 400, 24)]
    v = judge(ESTIMATE, rows, cause="the calibration slope")
    assert v.status == "missed" and "band ±25%" in v.text and "the calibration slope" in v.text


def test_one_warm_up_outlier_does_not_decide_an_estimate_but_is_reported():
    rows = [(16, 18.0, 1.0), *((x, 1.05, 1.0) for x in (32, 64, 128, 256))]
    v = judge(ESTIMATE, rows)
    assert v.status == "held" and "held within ±5%" in v.text
    assert v.worst_ratio == 18.0 and v.worst_x == 16


def test_contention_is_stated_instead_of_failing_but_never_excuses_an_exact_count():
    busy = {"cpus": 2, "load_start": [3.9, 2.0, 1.0], "load_end": [4.1, 2.2, 1.1],
            "cpu_share_pct": 35.0, "torch_threads": 1}  # fmt: skip
    why = contention(busy)
    assert "load average 4.10 on 2 cores" in why and "35 % CPU" in why
    v = judge(ESTIMATE, [(1, 3.0, 1.0)], why)
    assert v.status == "inconclusive" and "under contention" in v.text
    assert judge(EXACT, [(1, 1025, 1024)], why).status == "missed"
    assert judge(EXACT, [(1, 1024, 1024)], why).status == "held"
    quiet = {"cpus": 2, "load_start": [0.5], "load_end": [1.2], "cpu_share_pct": 99.0,
             "torch_threads": 1}  # fmt: skip
    assert contention(quiet) == "" and contention(None) == ""


class TwoSeries(Lab):
    slug, title, summary, topics, params = "t", "t", "t", (), ()
    series = (Series("prefill", "m"), BOUND, Series("none", "m"), ESTIMATE)


def test_pairs_use_extra_predicted_or_the_predicted_series_at_that_x():
    points = [
        Point("prefill-roofline", 10, 1.0), Point("prefill-roofline", 20, 3.0),
        Point("prefill", 15, 4.0),  # between the roofline's points: 2.0 by interpolation
        Point("none", 1, 2.0, {"predicted": 2.0}),
    ]  # fmt: skip
    got = pairs(TwoSeries(), points)
    assert got == {"prefill-roofline": [(15, 4.0, 2.0)], "none-predicted": [(1, 2.0, 2.0)]}
    verdicts = {v.series: v for v in judge_run(TwoSeries(), points)}
    assert verdicts["prefill-roofline"].status == "held"
    assert verdicts["none-predicted"].status == "held"
    assert judge(ESTIMATE, []).status == "no points"


def test_a_bound_held_far_from_its_points_says_it_is_loose_and_why():
    far = judge(BOUND, [(16, 10.0, 1.1), (64, 12.0, 2.0), (512, 30.0, 20.0)])  # median 6×
    assert far.status == "held" and far.tightness == "loose"
    assert "loose: the median point is 6.0× the bound" in far.text
    assert "would tighten it" in far.text  # the generic reason, with the way out
    told = judge(BOUND, [(16, 10.0, 1.1)], loose="the weights sit in the cache")
    assert told.text.endswith("— the weights sit in the cache")
    near = judge(BOUND, [(16, 1.3, 1.1), (512, 30.0, 20.0)])
    assert near.status == "held" and near.tightness == "tight" and "loose" not in near.text
    assert "tight: the median point is" in near.text


def test_tight_means_within_two_times_of_the_median_point():
    assert judge(BOUND, [(1, 1.99, 1.0)]).tightness == "tight"
    assert judge(BOUND, [(1, 2.01, 1.0)]).tightness == "loose"
    assert judge(BOUND, [(1, 0.5, 1.0)]).tightness == ""  # missed: no tightness
    assert judge(ESTIMATE, [(1, 1.0, 1.0)]).tightness == ""
