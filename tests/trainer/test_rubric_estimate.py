"""The estimate's answer-level context (issue 29): the share of an answer's ordinary points
verified, and the share read close to a wrong version or with a wrong number. Counted from
the decisions, and read by the tuned model as an interviewer would: the same unverified
sentence is likelier credited in an answer that gets the rest right than in one in doubt."""

from __future__ import annotations

from trainer.grading.rubric import estimate, numbers, params
from trainer.grading.rubric.verify import Decision, Facts


def _facts(**kw) -> Facts:
    base = dict(pos=0.62, neg=0.3, share=0.5, negated=False, numbers=numbers.Status.NONE,
                number_reason="", stuffing=0.0, verified=False, contradicted=False)  # fmt: skip
    return Facts(**(base | kw))


def _decision(verdict: str, **kw) -> Decision:
    return Decision(verdict, 0, _facts(**kw), "", True, 0.62)


def test_the_context_counts_ordinary_points_only():
    decisions = [
        _decision("hit", verified=True),
        _decision("unclear", suspect=True),
        _decision("unclear", numbers=numbers.Status.WRONG),
        _decision("contradicted", contradicted=True),
        _decision("hit", verified=True),  # a red flag raised: not in either share
    ]
    verified, doubt = estimate.answer_context(decisions, [False, False, False, False, True])
    assert verified == 1 / 4
    assert doubt == 3 / 4
    assert estimate.answer_context([], []) == (0.0, 0.0)


def test_the_same_unclear_sentence_is_likelier_credited_beside_verified_points():
    vague = _decision("unclear")
    calibration = params.load().calibration
    assert calibration.features == estimate.FEATURES
    sound = estimate.estimate(vague, True, calibration, (0.8, 0.0))
    doubtful = estimate.estimate(vague, True, calibration, (0.1, 0.6))
    assert 0.0 < doubtful < sound < 1.0
