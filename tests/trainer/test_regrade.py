"""`python -m manage regrade`: stored answers re-graded with the current grader, the moved
scores reported, the old score kept in the result, review schedules left alone."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from questions.models import Question, RubricPoint, Topic
from trainer.models import Attempt, ReviewCard

pytestmark = pytest.mark.django_db

OLD_RESULT = {  # a wave-1 result: points with `hit` booleans, no verdicts, no versions
    "score": 0.9,
    "confidence": 0.8,
    "flags": [],
    "points": [
        {"index": 0, "hit": True, "similarity": 0.7, "evidence": "x", "penalty": False, "weight": 1}
    ],
}


@pytest.fixture
def stored(django_user_model):
    topic = Topic.objects.create(slug="kv-cache-basics", title="KV cache", order=1)
    question = Question.objects.create(
        topic=topic,
        slug="what-the-cache-holds",
        kind="scenario",
        title="What is cached",
        prompt="What does the KV cache store, and why?",
        status="published",
    )
    RubricPoint.objects.create(
        question=question,
        order=0,
        weight=1,
        text="The KV cache stores each past token's keys and values for every layer, not the queries.",
        claims=["The cache holds the keys and values of earlier tokens, per layer."],
        contradictions=["The KV cache stores the queries."],
        key_terms=["keys | key", "values | value"],
    )
    user = django_user_model.objects.create_user("regraded", password="pw-regraded-123")
    wrong = Attempt.objects.create(  # confidently wrong, credited by the old grader
        user=user,
        question=question,
        submitted="2026-11-01T10:00Z",
        score=0.9,
        result=OLD_RESULT,
        answer="The KV cache stores the queries of earlier tokens so attention can skip recomputing them.",
    )
    card = ReviewCard.objects.create(
        user=user, question=question, due="2026-12-10T10:00Z", card={"x": 1}
    )
    return question, wrong, card


def run(*args):
    out = io.StringIO()
    call_command("regrade", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_reports_the_moved_score_and_saves_nothing(stored):
    _, wrong, _ = stored
    out = run("--dry-run")
    assert (
        "1 attempt(s) re-graded (dry run: nothing saved); 1 score(s) would move (0 up, 1 down"
        in out
    )
    wrong.refresh_from_db()
    assert wrong.score == 0.9 and wrong.result == OLD_RESULT


def test_a_regrade_stores_the_new_verdicts_and_what_they_replaced(stored):
    _, wrong, card = stored
    out = run()
    assert "1 score(s) moved (0 up, 1 down" in out
    wrong.refresh_from_db()
    assert wrong.score < 0.5
    assert wrong.result["points"][0]["verdict"] in {"contradicted", "unclear"}  # no longer a hit
    assert wrong.result["grader_version"] == "3.0"
    assert wrong.result["regraded"]["from_score"] == 0.9
    assert wrong.result["regraded"]["from_grader_version"] == "1"
    card.refresh_from_db()
    assert card.card == {"x": 1} and card.due.isoformat().startswith("2026-12-10")  # fsrs untouched


def test_the_report_counts_contradicted_verdicts_and_red_flags_before_and_after(stored):
    _, wrong, _ = stored
    stale = dict(OLD_RESULT)
    stale["points"] = [
        dict(p, verdict="contradicted", decided_by="estimate") if not p.get("penalty") else p
        for p in OLD_RESULT["points"]
    ]
    wrong.result = stale
    wrong.save(update_fields=["result"])
    out = run("--dry-run")
    n = sum(not p.get("penalty") for p in OLD_RESULT["points"])
    assert f"contradicted verdicts: {n} before," in out
    assert "red flags raised: 0 before" in out


def test_a_second_regrade_moves_nothing(stored):
    run()
    assert "0 score(s) moved" in run()


def test_an_answered_check_survives_a_regrade_while_the_point_is_unchanged(stored):
    question, wrong, _ = stored
    run()
    wrong.refresh_from_db()
    point = wrong.result["points"][0]
    wrong.result["points"][0] = point | {
        "verdict": "hit",
        "decided_by": "check",
        "reason": "check passed",
    }
    wrong.save()
    run()
    wrong.refresh_from_db()
    assert wrong.result["points"][0]["decided_by"] == "check"
    assert wrong.score == 1.0
    # Once the point's text changes, the old check says nothing about it: re-graded afresh.
    RubricPoint.objects.filter(question=question).update(
        text="The cache keeps K and V of past tokens."
    )
    run()
    wrong.refresh_from_db()
    assert wrong.result["points"][0]["decided_by"] != "check"


def test_only_the_named_question_is_regraded(stored):
    with pytest.raises(CommandError, match="No question"):
        run("--question", "no-such-question")
    assert "1 attempt(s) re-graded" in run("--question", "what-the-cache-holds", "--dry-run")


def test_the_progress_page_marks_a_regraded_attempt(stored, client):
    _, wrong, _ = stored
    run()
    client.force_login(wrong.user)
    page = client.get("/progress/").content.decode()
    assert "re-graded" in page
