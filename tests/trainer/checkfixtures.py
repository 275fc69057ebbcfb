"""A small published scenario question whose points carry checks, and graded attempts with
results in the verifying grader's shape (built here, so the feedback and the checks are
tested without depending on what the grader decides)."""

from __future__ import annotations

from django.utils import timezone

from questions.models import Question, RubricPoint, Topic
from trainer.models import Attempt

SLUG = "kv-check-demo"
ANSWER = (
    "Each token stores K and V for every layer and KV head: that is 512 KiB per token. "
    "Decode reads every weight for one token per sequence, so it is probably about bandwidth."
)
CHOICE_ASK = "At batch 1, which phase of a 70B request is compute-bound?"
NUMBER_ASK = "How many KiB of KV cache does one token of Llama-3-70B take in BF16?"


def make_question() -> Question:
    topic, _ = Topic.objects.get_or_create(slug="check-demo", defaults={"title": "Check demo"})
    question = Question.objects.create(
        topic=topic,
        slug=SLUG,
        kind=Question.Kind.SCENARIO,
        title="How big is the KV cache per token?",
        difficulty=2,
        competencies=["memory"],
        status=Question.Status.PUBLISHED,
        prompt="Size the KV cache of Llama-3-70B per token and say what bounds decode.",
        model_answer="2 x 80 layers x 8 KV heads x 128 x 2 B = 320 KiB per token.",
        follow_ups=[
            {
                "prompt": "What changes with FP8 KV cache?",
                "rubric": [
                    {
                        "text": "Halves the KV bytes per token to about 160 KiB.",
                        "weight": 1,
                        "claims": ["FP8 halves the KV cache: about 160 KiB per token."],
                        "contradictions": ["FP8 doubles the KV cache."],
                        "key_terms": ["FP8 | 8-bit", "KV"],
                    }
                ],
            },
            "Why not cache the queries?",
        ],
    )
    RubricPoint.objects.create(
        question=question,
        order=0,
        weight=2,
        text="Sizes the KV cache per token with KV heads: about 320 KiB in BF16.",
        claims=["2 x 80 layers x 8 KV heads x 128 x 2 B = 320 KiB per token."],
        contradictions=["The KV cache uses all 64 attention heads."],
        key_terms=["KV", "token"],
        expects=["320 KiB ±10%"],
        check_spec={"ask": NUMBER_ASK, "number": "320 KiB ±5%"},
    )
    RubricPoint.objects.create(
        question=question,
        order=1,
        weight=1,
        text="Says decode is memory-bound and prefill compute-bound.",
        claims=["Decode is memory-bound; prefill is compute-bound."],
        contradictions=["Decode is compute-bound.", "Prefill is limited by memory bandwidth."],
        key_terms=["decode"],
        check_spec={
            "ask": CHOICE_ASK,
            "answer": "Prefill",
            "options": ["Decode", "Both", "Neither"],
        },
    )
    RubricPoint.objects.create(
        question=question,
        order=2,
        weight=1,
        penalty=True,
        text="Claims the cache stores the queries.",
    )
    RubricPoint.objects.create(
        question=question,
        order=3,
        weight=1,
        text="Notes GQA shrinks the cache 8x against full multi-head attention.",
        claims=["GQA with 8 KV heads shrinks the cache 8x against 64 heads."],
        check_spec={
            "ask": "How many KV heads does Llama-3-70B have?",
            "answer": "8",
            "options": ["64", "1"],
        },
    )
    return question


def point(
    index,
    text,
    weight,
    verdict,
    *,
    attempted=True,
    penalty=False,
    decided_by="verify",
    estimate=0.5,
    evidence="",
    reason="",
):
    return {
        "index": index,
        "text": text,
        "weight": weight,
        "penalty": penalty,
        "verdict": verdict,
        "estimate": estimate,
        "decided_by": decided_by,
        "evidence": evidence,
        "evidence_parts": [evidence] if evidence else [],
        "reason": reason,
        "attempted": attempted,
        "rubric_version": f"v{index:011d}",
        "check": None,
    }


def graded_result(question: Question) -> dict:
    """Point 0 contradicted (a wrong number), 1 unclear, 2 (red flag) missed, 3 not attempted."""
    texts = [p.text for p in question.rubric.all()]
    points = [
        point(
            0,
            texts[0],
            2,
            "contradicted",
            estimate=0.3,
            evidence="Each token stores K and V for every layer and KV head: that is 512 KiB per token.",
            reason="You said 512 KiB per token; this point expects ≈320 KiB.",
        ),
        point(
            1,
            texts[1],
            1,
            "unclear",
            decided_by="estimate",
            estimate=0.5,
            evidence="Decode reads every weight for one token per sequence, so it is probably about bandwidth.",
        ),
        point(2, texts[2], 1, "missed", penalty=True, attempted=False, estimate=0.0),
        point(3, texts[3], 1, "missed", attempted=False, decided_by="estimate", estimate=0.1),
    ]
    # (0 + 0.5 x 1 + 0) / 4 = 0.125; nothing verified
    return {
        "grader": "rubric",
        "grader_version": "2.0",
        "score": 0.125,
        "verified_share": 0.0,
        "flags": [],
        "points": points,
    }


def graded_attempt(user, question: Question, result: dict | None = None) -> Attempt:
    now = timezone.now()
    result = result if result is not None else graded_result(question)
    return Attempt.objects.create(
        user=user,
        question=question,
        answer=ANSWER,
        draft=ANSWER,
        submitted=now,
        graded=now,
        result=result,
        score=result.get("score", 0.0),
    )


def assert_not_called_wrong(result) -> None:
    """A graded answer with no contradicted point, no red-flag point hit and no red flag:
    what a correct sentence must get (issue 29's fair sentences, issue 30's audit)."""
    wrong = [(p.index, p.reason) for p in result.points if p.verdict == "contradicted"]
    assert wrong == []
    assert not any(p.penalty and p.verdict == "hit" for p in result.points)
    assert "red flag" not in result.flags
