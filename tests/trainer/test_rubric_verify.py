"""The verify stage end to end with the packaged model, on hand-made points: a negated,
reversed or wrongly quantified statement is not credited; stuffing is not an answer;
plain-text points still work."""

from __future__ import annotations

from trainer.grading.rubric import Point, grade

PHASES = Point(
    "Contrasts the phases: prefill is compute-bound, decode is memory-bound",
    3,
    ("arithmetic intensity",),
    claims=(
        "Prefill is compute-bound because it does many FLOP per weight byte loaded.",
        "Decode is memory-bound because it does only about 2 x batch FLOP per byte loaded.",
    ),
    contradictions=("Decode is compute-bound.", "Prefill is limited by memory bandwidth."),
    key_terms=("prefill | decode", "compute-bound | compute bound | FLOP | memory-bound"),
)
KV = Point(
    "Computes the KV cache per token of Llama-3.1-70B in BF16: about 320 KiB",
    2,
    claims=("KV cache per token is 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 320 KiB.",),
    contradictions=("KV per token uses all 64 attention heads.",),
    key_terms=("KV",),
    expects=("320 KiB ±10%",),
)
RED_FLAG = Point(
    "Claims that streaming lowers the end-to-end latency of a request", 1, penalty=True
)
POINTS = [PHASES, KV, RED_FLAG]


def verdicts(answer: str, points=POINTS) -> list[str]:
    return [p.verdict for p in grade(answer, points).points]


def test_a_correct_answer_is_verified():
    result = grade(
        "Prefill is compute-bound since it does thousands of FLOP per weight byte. "
        "Decode is memory-bound: it reads every weight for one token per sequence. "
        "The KV cache takes 320 KiB per token.",
        POINTS,
    )
    assert [p.verdict for p in result.points] == ["hit", "hit", "missed"]
    assert all(p.decided_by == "verify" for p in result.points[:2])
    assert result.score == 1.0 and result.verified_share == 1.0


def test_a_negated_claim_is_contradicted():
    result = grade("Prefill is not compute-bound, and decode is not memory-bound.", POINTS)
    point = result.points[0]
    assert point.verdict == "contradicted" and point.attempted
    assert point.decided_by == "verify" and "denies" in point.reason


def test_a_reversed_claim_is_not_credited_but_not_called_wrong_without_proof():
    # Closeness to the authored contradictions is no proof (issue 29): the point is not
    # verified, its estimate drops, and the reason says what was not verified.
    result = grade(
        "Decode is the compute-bound phase. Prefill is limited by memory bandwidth.", POINTS
    )
    point = result.points[0]
    assert point.verdict == "unclear" and point.decided_by == "estimate"
    assert point.reason.startswith("Not verified")
    assert point.estimate < 0.5  # not credited as covered
    assert result.score < 0.35


def test_a_wrong_number_with_the_right_unit_is_contradicted_with_its_reason():
    result = grade("Per token, the KV cache of this model takes 512 KiB.", POINTS)
    point = result.points[1]
    assert point.verdict == "contradicted"
    assert point.reason == "You said 512 KiB; this point expects ≈320 KiB."
    assert point.evidence == "Per token, the KV cache of this model takes 512 KiB."


def test_gb_for_gib_is_a_wrong_number_at_a_tight_tolerance():
    per_sequence = Point(
        "Computes the KV cache of one 32K-token sequence: 10 GiB",
        1,
        claims=("One 32K-token sequence holds 10 GiB of KV cache.",),
        key_terms=("KV | cache",),
        expects=("10 GiB ±2%",),
    )
    hit = grade("A full 32K-token sequence holds 10 GiB of KV cache.", [per_sequence])
    wrong = grade("A full 32K-token sequence holds 10 GB of KV cache.", [per_sequence])
    assert hit.points[0].verdict == "hit"
    assert wrong.points[0].verdict == "contradicted" and "10 GB" in wrong.points[0].reason


def test_keyword_stuffing_is_not_an_answer():
    result = grade(
        "Prefill, decode, compute-bound, memory-bound, FLOP, bandwidth, KV cache, KiB.", POINTS
    )
    assert all(p.verdict != "hit" for p in result.points)
    assert result.score <= 0.25


def test_a_sentence_close_to_a_red_flag_is_possibly_said_and_costs_nothing():
    # A red flag is a statement of fact about the answer: similarity alone never raises it
    # (the judge can). The page says "possibly said (not verified)".
    answer = (
        "Prefill is compute-bound since it does thousands of FLOP per weight byte. "
        "Streaming lowers the end-to-end latency of every request."
    )
    result = grade(answer, POINTS)
    flag = result.points[2]
    assert flag.verdict == "unclear" and flag.reason.startswith("Not verified")
    assert "red flag" not in result.flags
    assert result.score == grade(answer.split(". ")[0] + ".", POINTS).score


def test_plain_text_points_use_their_words_numbers_and_negation():
    plain = [
        Point("Streams tokens so the user sees the first words early", 1.0),
        Point("Notes that KV for Llama-3-8B is about 128 KiB per token", 1.0),
    ]
    good = grade(
        "We stream tokens so the user sees the first words early. "
        "For Llama-3-8B the KV is about 128 KiB per token.",
        plain,
    )
    assert [p.verdict for p in good.points] == ["hit", "hit"]
    bad = grade(
        "We do not stream tokens, so the user never sees the first words early. "
        "For Llama-3-8B the KV is about 320 KiB per token.",
        plain,
    )
    assert [p.verdict for p in bad.points] == ["contradicted", "contradicted"]


def test_an_unrelated_answer_misses_everything_and_is_off_topic():
    result = grade(
        "Put a load balancer in front of the web tier and autoscale on CPU above sixty percent.",
        POINTS,
    )
    assert {p.verdict for p in result.points} == {"missed"}
    assert result.score == 0.0 and "off-topic" in result.flags


def test_every_point_reports_estimate_attempted_and_rubric_version():
    result = grade("Decode is memory-bound because it streams all weights each step.", POINTS)
    for p in result.as_dict()["points"]:
        assert 0.0 <= p["estimate"] <= 1.0
        assert isinstance(p["attempted"], bool) and len(p["rubric_version"]) == 12
    assert result.as_dict()["grader_version"] == "3.0"


def test_a_check_is_offered_for_an_attempted_unclear_or_contradicted_point_only():
    checked = Point(
        KV.text,
        KV.weight,
        claims=KV.claims,
        key_terms=KV.key_terms,
        expects=KV.expects,
        check={
            "kind": "choice",
            "ask": "Which heads set the KV size?",
            "answer": "KV heads",
            "options": ["attention heads", "query heads"],
        },
    )
    wrong = grade("Per token, the KV cache of this model takes 512 KiB.", [checked]).points[0]
    assert wrong.verdict == "contradicted"
    assert wrong.check["kind"] == "choice" and "answer" not in wrong.check
    assert sorted(wrong.check["options"]) == ["KV heads", "attention heads", "query heads"]
    right = grade("Per token, the KV cache of this model takes 320 KiB.", [checked]).points[0]
    unrelated = grade("We autoscale the web tier on CPU above sixty percent.", [checked])
    assert right.check is None and unrelated.points[0].check is None
