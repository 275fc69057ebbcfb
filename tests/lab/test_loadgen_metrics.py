"""lab.loadgen.metrics on hand-made timelines: vLLM's TTFT / TPOT / ITL / E2EL, goodput."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lab.loadgen.metrics import (
    Attempt,
    RequestRecord,
    StreamChunk,
    chunk_token_counts,
    format_summary,
    stream_latencies,
    summarize,
)


def done(chunks, e2e, *, index=0, start=0.0, output_tokens=None, prompt_tokens=10, attempts=1):
    """A successful request: `chunks` as (seconds since attempt start, text, tokens)."""
    record = RequestRecord(index, start=start, prompt_tokens=prompt_tokens)
    failed = [Attempt(start + i, start + i + 0.5, "http 503: busy") for i in range(attempts - 1)]
    ok_start = start + attempts - 1
    record.attempts = [*failed, Attempt(ok_start, ok_start + e2e, "ok")]
    record.complete([StreamChunk(*c) for c in chunks], e2e, output_tokens)
    return record


def failed(index=0, attempts=1, outcome="timeout"):
    record = RequestRecord(index, start=0.0, prompt_tokens=10, error=outcome)
    record.attempts = [Attempt(float(i), i + 1.0, outcome) for i in range(attempts)]
    return record


def one_token_chunks(ttft, n, e2e):
    """n one-token chunks, the first at ttft, the rest evenly up to e2e."""
    step = (e2e - ttft) / (n - 1)
    return [(ttft + i * step, f"t{i}", 1) for i in range(n)]


def test_tpot_excludes_the_first_token():
    r = done(one_token_chunks(0.1, 5, 0.5), e2e=0.5)
    assert r.ttft == pytest.approx(0.1)
    assert r.e2e == pytest.approx(0.5)
    assert r.output_tokens == 5
    assert r.tpot == pytest.approx(0.1)  # (500 - 100) ms / (5 - 1), not 500 / 5
    assert r.itl == pytest.approx([0.1] * 4)


def test_tpot_undefined_for_one_token():
    r = done([(0.2, "x", 1)], e2e=0.25)
    assert r.tpot is None
    assert r.itl == []
    s = summarize([r], duration_s=1.0)
    assert s["tpot_ms"]["mean"] is None
    assert s["ttft_ms"]["mean"] == pytest.approx(200)


def test_itl_counts_every_token_of_a_multi_token_chunk():
    r = done([(0.1, "a", 1), (0.13, "bcd", 3), (0.15, "e", 1)], e2e=0.15)
    assert r.itl == pytest.approx([0.01, 0.01, 0.01, 0.02])
    assert r.output_tokens == 5
    s = summarize([r], duration_s=1.0)
    assert s["itl_ms"]["median"] == pytest.approx(10)
    assert s["itl_ms"]["mean"] == pytest.approx(12.5)


def test_first_chunk_tokens_give_no_itl():
    ttft, itl = stream_latencies([StreamChunk(0.1, "abc", 3), StreamChunk(0.2, "d", 1)])
    assert ttft == pytest.approx(0.1)
    assert itl == pytest.approx([0.1])


def test_empty_first_chunk_is_not_the_first_token():
    # a chat stream opens with a role-only delta: no text, no tokens
    r = done([(0.02, "", 0), (0.1, "a", 1), (0.2, "b", 1)], e2e=0.2)
    assert r.ttft == pytest.approx(0.1)
    assert r.itl == pytest.approx([0.1])
    assert r.chunk_times == [0.02, 0.1, 0.2]
    assert r.chunk_tokens == [0, 1, 1]


def test_no_text_at_all_has_no_ttft():
    r = done([(0.1, "", 0)], e2e=0.1, output_tokens=0)
    assert r.ttft is None and r.itl == [] and r.tpot is None
    s = summarize([r], 1.0, slo={"e2el_ms": 1000})
    assert s["completed"] == 1 and s["ttft_ms"]["mean"] is None
    assert s["good_requests"] == 1
    assert summarize([r], 1.0, slo={"ttft_ms": 1000})["good_requests"] == 0


def test_token_chunks_skip_empty_chunks_in_itl():
    # a finish chunk with no text and no tokens does not split the previous gap
    r = done([(0.1, "a", 1), (0.2, "b", 1), (0.25, "", 0)], e2e=0.3)
    assert r.itl == pytest.approx([0.1])


def test_output_tokens_from_usage_win_over_the_chunk_sum():
    r = done([(0.1, "ab", 1), (0.2, "c", 1)], e2e=0.2, output_tokens=3)
    assert r.output_tokens == 3
    assert r.tpot == pytest.approx(0.05)


def test_chunk_token_counts_from_usage_deltas():
    assert chunk_token_counts(["", "a", "bcd", "e", ""], [0, 1, 4, 5, 5]) == [0, 1, 3, 1, 0]
    # a role-only chat opener without usage does not spoil the deltas
    assert chunk_token_counts(["", "a", "bcd"], [None, 1, 4], len) == [0, 1, 3]


def test_chunk_token_counts_fall_back_to_a_tokenizer_then_to_one_per_chunk():
    texts = ["", "ab", "cde"]
    partial_usage = [None, 1, None]  # usage not in every chunk: deltas would be wrong
    assert chunk_token_counts(texts, partial_usage, len) == [0, 2, 3]
    assert chunk_token_counts(texts, [None] * 3) == [0, 1, 1]


def test_latency_stats_match_numpy():
    rng = random.Random(3)
    records = []
    for i in range(101):
        ttft = rng.uniform(0.01, 0.5)
        n = rng.randint(2, 20)
        e2e = ttft + (n - 1) * rng.uniform(0.005, 0.05)
        records.append(done(one_token_chunks(ttft, n, e2e), e2e, index=i))
    s = summarize(records, duration_s=10.0)
    for key, values in {
        "ttft_ms": [r.ttft for r in records],
        "tpot_ms": [r.tpot for r in records],
        "itl_ms": [x for r in records for x in r.itl],
        "e2el_ms": [r.e2e for r in records],
    }.items():
        ms = np.array(values) * 1000
        assert s[key]["mean"] == pytest.approx(np.mean(ms))
        assert s[key]["median"] == pytest.approx(np.median(ms))
        assert s[key]["p90"] == pytest.approx(np.percentile(ms, 90))
        assert s[key]["p99"] == pytest.approx(np.percentile(ms, 99))
        assert s[key]["std"] == pytest.approx(np.std(ms))


def test_percentiles_interpolate_linearly():
    records = [
        done([(t, "x", 1), (t + 0.1, "y", 1)], t + 0.1, index=i)
        for i, t in enumerate([0.1, 0.2, 0.3, 0.4])
    ]
    s = summarize(records, duration_s=1.0)
    assert s["ttft_ms"]["median"] == pytest.approx(250)
    assert s["ttft_ms"]["p90"] == pytest.approx(370)  # 300 + 0.7 * 100
    assert s["ttft_ms"]["p99"] == pytest.approx(397)


def test_goodput_needs_every_slo():
    fast = done(one_token_chunks(0.1, 5, 0.3), 0.3, index=0)  # TPOT 50 ms
    slow_start = done(one_token_chunks(0.6, 5, 0.8), 0.8, index=1)  # TTFT 600 ms
    slow_decode = done(one_token_chunks(0.1, 5, 0.9), 0.9, index=2)  # TPOT 200 ms
    single = done([(0.2, "x", 1)], 0.2, index=3)  # one token: TPOT counts as 0
    records = [fast, slow_start, slow_decode, single, failed(index=4)]

    s = summarize(records, duration_s=2.0, slo={"ttft_ms": 500, "tpot_ms": 100})
    assert s["good_requests"] == 2  # fast and single
    assert s["goodput"] == pytest.approx(1.0)
    assert s["request_throughput"] == pytest.approx(2.0)

    assert summarize(records, 2.0, slo={"ttft_ms": 500})["good_requests"] == 3
    assert summarize(records, 2.0, slo={"e2el_ms": 850})["good_requests"] == 3
    assert summarize(records, 2.0, slo={"ttft_ms": 100})["good_requests"] == 2  # "at most"
    none = summarize(records, 2.0)
    assert none["goodput"] is None and none["good_requests"] is None and none["slo"] == {}


def test_unknown_slo_is_rejected():
    with pytest.raises(ValueError, match="unknown SLO"):
        summarize([], 1.0, slo={"ttft": 100})


def test_failed_requests_count_in_offered_load_not_in_latency():
    ok = done(one_token_chunks(0.1, 5, 0.5), 0.5, index=0, attempts=2, prompt_tokens=7)
    bad = failed(index=1, attempts=4)
    s = summarize([ok, bad], duration_s=2.0)
    assert s["requests"] == 2 and s["completed"] == 1 and s["failed"] == 1
    assert s["attempts"] == 6
    assert s["offered_load"] == pytest.approx(3.0)  # 6 attempts / 2 s
    assert s["useful_load"] == pytest.approx(0.5)
    assert s["request_throughput"] == pytest.approx(0.5)
    assert s["attempts_per_request"] == pytest.approx(3.0)
    assert s["outcomes"] == {"http 503": 1, "ok": 1, "timeout": 4}
    assert s["ttft_ms"]["mean"] == pytest.approx(100)  # the failed request adds nothing
    assert s["e2el_ms"]["p99"] == pytest.approx(500)
    assert s["total_input_tokens"] == 7
    assert s["total_output_tokens"] == 5
    assert s["output_throughput"] == pytest.approx(2.5)
    assert s["total_token_throughput"] == pytest.approx(6.0)


def test_empty_summary_is_json_and_prints():
    s = summarize([], duration_s=0.0)
    assert s["completed"] == 0 and s["request_throughput"] is None
    assert s["ttft_ms"] == {"mean": None, "median": None, "p90": None, "p99": None, "std": None}
    json.dumps(s, allow_nan=False)
    assert "n/a" in format_summary(s)


def test_summary_table_has_vllm_labels():
    s = summarize([done(one_token_chunks(0.1, 5, 0.5), 0.5)], 1.0, slo={"ttft_ms": 200})
    text = format_summary(s)
    for label in [
        "Successful requests:",
        "Benchmark duration (s):",
        "Request throughput (req/s):",
        "Request goodput (req/s):",
        "Output token throughput (tok/s):",
        "Mean TTFT (ms):",
        "Median TPOT (ms):",
        "P90 ITL (ms):",
        "P99 E2EL (ms):",
        "Offered load (attempts/s):",
        "Useful load (successful req/s):",
    ]:
        assert label in text
    assert "Mean TTFT (ms):                          100.00" in text


def test_record_to_dict_is_relative_and_json_ready():
    r = done(one_token_chunks(0.1, 3, 0.3), 0.3, start=100.0, attempts=2)
    r.server_timing = {"queue": 1.5}
    d = r.to_dict(origin=100.0)
    assert d["start"] == 0.0
    assert [a["outcome"] for a in d["attempts"]] == ["http 503: busy", "ok"]
    assert d["attempts"][1]["start"] == pytest.approx(1.0)
    assert d["tpot"] == pytest.approx(0.1)
    assert d["server_timing"] == {"queue": 1.5}
    json.dumps(d, allow_nan=False)
