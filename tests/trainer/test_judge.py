"""The optional judge (trainer/grading/judge.py): its prompt, its reply parsing, folding its
verdicts into a stored result, and the whole path through a real Celery worker against a fake
OpenAI-compatible endpoint on 127.0.0.1 (a real HTTP server)."""

from __future__ import annotations

import time

import pytest

from tests.trainer.fake_judge import FakeJudge
from trainer.grading import judge

POINT = {
    "index": 1,
    "text": "Decode is memory-bound at small batch.",
    "claims": [
        "Decode streams all the weights for one token per sequence, so bandwidth limits it."
    ],
    "contradictions": ["Decode is compute-bound."],
}


@pytest.fixture
def fake():
    server = FakeJudge()
    yield server
    server.close()


def config(fake, timeout=2.0):
    return judge.JudgeConfig(fake.url, "judge-model", "secret-key", timeout)


def stored_result():
    return {
        "grader": "rubric",
        "grader_version": "2.0",
        "score": 0.25,
        "points": [
            {
                "index": 0,
                "text": "a",
                "weight": 1,
                "penalty": False,
                "verdict": "hit",
                "decided_by": "verify",
                "estimate": 0.9,
                "attempted": True,
            },
            {
                "index": 1,
                "text": "b",
                "weight": 1,
                "penalty": False,
                "verdict": "unclear",
                "decided_by": "estimate",
                "estimate": 0.4,
                "attempted": True,
            },
            {
                "index": 2,
                "text": "c",
                "weight": 1,
                "penalty": False,
                "verdict": "unclear",
                "decided_by": "check",
                "estimate": 0.4,
                "attempted": True,
            },
            {
                "index": 3,
                "text": "d",
                "weight": 1,
                "penalty": True,
                "verdict": "unclear",
                "decided_by": "estimate",
                "estimate": 0.4,
                "attempted": True,
            },
        ],
    }


def test_the_prompt_carries_the_point_its_claims_and_its_wrong_versions():
    message = judge.user_message("Why is decode slow?", POINT, "It is compute-bound.")
    for text in (
        "Why is decode slow?",
        POINT["text"],
        POINT["claims"][0],
        POINT["contradictions"][0],
        "It is compute-bound.",
    ):
        assert text in message


@pytest.mark.parametrize(
    "content, error",
    [
        ("not json", "not JSON"),
        ('{"verdict": "maybe"}', "schema"),
        ("[1, 2]", "schema"),
        (None, "not JSON"),
    ],
)
def test_a_reply_off_the_schema_is_an_error(content, error):
    with pytest.raises(judge.JudgeError, match=error):
        judge.parse_reply(content, 0)


def test_only_unclear_points_not_decided_by_a_check_nor_penalties_are_judged():
    assert [p["index"] for p in judge.pending_points(stored_result())] == [1]


def test_verdicts_fold_in_only_where_the_point_is_still_unclear():
    verdicts = [
        judge.JudgeVerdict(1, "covered", "my words", "states it"),
        judge.JudgeVerdict(0, "contradicted", "", "no"),  # already hit by verification: kept
        judge.JudgeVerdict(2, "contradicted", "", "no"),  # decided by a check meanwhile: kept
    ]
    seen = {}

    def rescore(result):
        seen["points"] = result["points"]
        return result | {"score": 0.5}

    new = judge.apply_verdicts(stored_result(), verdicts, rescore, "judge-model")
    by_index = {p["index"]: p for p in seen["points"]}
    assert by_index[1]["verdict"] == "hit" and by_index[1]["decided_by"] == "judge"
    assert by_index[1]["evidence"] == "my words"
    assert by_index[0]["verdict"] == "hit" and by_index[0]["decided_by"] == "verify"
    assert by_index[2]["verdict"] == "unclear" and by_index[2]["decided_by"] == "check"
    assert new["judge"] == {"status": "done", "model": "judge-model", "points": 3}
    assert new["score"] == 0.5


@pytest.mark.parametrize("mode", ["covered", "not_covered", "contradicted"])
def test_a_point_is_judged_through_the_openai_client(fake, mode):
    fake.mode = mode
    verdict = judge.judge_point(config(fake), "Why is decode slow?", POINT, "Decode reads weights.")
    assert verdict == judge.JudgeVerdict(1, mode, "quoted words", f"judged {mode}")
    (request,) = fake.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == "Bearer secret-key"
    body = request["body"]
    assert body["model"] == "judge-model" and body["temperature"] == 0
    assert body["response_format"]["json_schema"]["schema"] == judge.SCHEMA
    assert "Decode reads weights." in body["messages"][1]["content"]


@pytest.mark.parametrize(
    "mode, error", [("error", "InternalServerError"), ("garbage", "not JSON"), ("slow", "Timeout")]
)
def test_a_failing_endpoint_is_a_judge_error(fake, mode, error):
    fake.mode = mode
    with pytest.raises(judge.JudgeError, match=error):
        judge.judge_point(config(fake, timeout=0.5), "q", POINT, "a")


def test_an_unreachable_endpoint_is_a_judge_error():
    cfg = judge.JudgeConfig("http://127.0.0.1:9/v1", "m", "", 1.0)
    with pytest.raises(judge.JudgeError, match="Connection"):
        judge.judge_point(cfg, "q", POINT, "a")


def test_settings_refuse_a_url_without_a_model(monkeypatch):
    import subprocess
    import sys

    env = {
        "RUBRIC_JUDGE_URL": "http://127.0.0.1:1/v1",
        "RUBRIC_JUDGE_MODEL": "",
        "PATH": "/usr/bin",
    }
    probe = subprocess.run(
        [sys.executable, "-c", "import trainer.settings"], capture_output=True, text=True, env=env
    )
    assert probe.returncode != 0 and "RUBRIC_JUDGE_MODEL" in probe.stderr


# The whole path: a real worker, a real broker, the fake endpoint.


def _attempt_with_unclear_point(django_user_model):
    from questions.models import Question, RubricPoint, Topic
    from trainer.models import Attempt

    topic = Topic.objects.create(slug="prefill-decode", title="Prefill vs decode", order=1)
    question = Question.objects.create(
        topic=topic,
        slug="why-decode-is-slow",
        kind="scenario",
        title="Why",
        prompt="Why is decode slow?",
        status="published",
    )
    for i, text in enumerate(["a", "Decode is memory-bound at small batch."]):
        RubricPoint.objects.create(question=question, order=i, text=text, weight=1)
    user = django_user_model.objects.create_user("judged", password="pw-judged-123")
    result = stored_result()
    result["points"] = result["points"][:2]
    return Attempt.objects.create(
        user=user,
        question=question,
        answer="Decode is bandwidth-bound.",
        submitted="2026-12-01T10:00Z",
        score=0.5,
        result=result,
    )


def _wait_for_judge(attempt, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attempt.refresh_from_db()
        if attempt.result.get("judge", {}).get("status") in {"done", "failed"}:
            return attempt
        time.sleep(0.2)
    pytest.fail(f"the judge did not finish: {attempt.result.get('judge')}")


@pytest.mark.celery_integration
@pytest.mark.django_db(transaction=True)
def test_the_worker_asks_the_judge_and_the_stored_verdict_changes(
    live_worker, fake, settings, django_user_model
):
    from django.db import transaction

    from trainer.judging import request_judge

    settings.RUBRIC_JUDGE_URL, settings.RUBRIC_JUDGE_MODEL = fake.url, "judge-model"
    attempt = _attempt_with_unclear_point(django_user_model)
    with transaction.atomic():
        request_judge(attempt)
        assert attempt.result["judge"]["status"] == "pending"  # the page can say so at once
        assert attempt.result["judge"]["points"] == 1
    attempt = _wait_for_judge(attempt)
    point = attempt.result["points"][1]
    assert (point["verdict"], point["decided_by"]) == ("hit", "judge")
    assert attempt.result["judge"]["status"] == "done"
    assert attempt.score == attempt.result["score"] == 1.0  # both points now hit
    assert len(fake.requests) == 1  # one unclear point, one call


@pytest.mark.celery_integration
@pytest.mark.django_db(transaction=True)
def test_a_failing_judge_is_retried_then_the_offline_verdict_stands(
    live_worker, fake, settings, django_user_model
):
    from django.db import transaction

    from trainer.judging import request_judge

    settings.RUBRIC_JUDGE_URL, settings.RUBRIC_JUDGE_MODEL = fake.url, "judge-model"
    settings.RUBRIC_JUDGE_RETRIES = 1
    fake.mode = "error"
    attempt = _attempt_with_unclear_point(django_user_model)
    with transaction.atomic():
        request_judge(attempt)
    attempt = _wait_for_judge(attempt)
    assert attempt.result["judge"]["status"] == "failed"
    assert "could not be reached" in attempt.result["judge"]["error"]
    assert attempt.result["points"][1]["verdict"] == "unclear"  # the offline verdict stands
    assert attempt.score == 0.5
    assert len(fake.requests) == 2  # the first try and one retry


def test_no_judge_is_requested_when_none_is_configured(settings, db, django_user_model):
    from trainer.judging import request_judge

    settings.RUBRIC_JUDGE_URL = ""
    attempt = _attempt_with_unclear_point(django_user_model)
    request_judge(attempt)
    attempt.refresh_from_db()
    assert "judge" not in attempt.result


def test_the_page_stops_waiting_for_a_judge_that_never_answers(settings):
    from datetime import timedelta

    from django.utils import timezone

    from trainer.judging import judge_state

    settings.RUBRIC_JUDGE_TIMEOUT_S, settings.RUBRIC_JUDGE_RETRIES = 10, 1
    now = timezone.now()
    fresh = {"judge": {"status": "pending", "since": now.isoformat(), "points": 2}}
    assert judge_state(fresh)["status"] == "pending"
    # 2 points x 10 s x 2 tries + 60 s = 100 s of budget
    old = {
        "judge": {
            "status": "pending",
            "since": (now - timedelta(seconds=101)).isoformat(),
            "points": 2,
        }
    }
    assert judge_state(old) == {
        "status": "late",
        "text": "The second opinion has not answered; the offline verdicts stand.",
    }
    assert judge_state({}) is None
    failed = {"judge": {"status": "failed", "error": "The second opinion could not be reached (x)"}}
    assert judge_state(failed)["status"] == "failed"
