"""The feedback page: per point its verdict in words, how it was decided, the learner's
sentence and the reason; the verified share of the total; old stored results; objections
(stored, queued for staff, exported as labelled answers, part of the learner's data);
follow-up answers graded with the same feedback."""

from __future__ import annotations

import io

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.core.management import call_command

from tests.trainer import checkfixtures as fx
from trainer import feedback, learner_data, objections
from trainer.models import FollowUpResponse, VerdictObjection

pytestmark = pytest.mark.django_db
PASSWORD = "prefill-then-decode"


@pytest.fixture
def ada(client):
    user = get_user_model().objects.create_user("ada", password=PASSWORD)
    client.login(username="ada", password=PASSWORD)
    return user


@pytest.fixture
def question():
    return fx.make_question()


def feedback_page(client, attempt) -> str:
    """The feedback, past the round of checks (skipped)."""
    client.get(f"/attempts/{attempt.pk}/")
    client.post(f"/attempts/{attempt.pk}/checks/", {"skip": "1"})
    return client.get(f"/attempts/{attempt.pk}/").content.decode()


def test_each_point_shows_its_verdict_how_it_was_decided_the_sentence_and_why(
    client, ada, question
):
    attempt = fx.graded_attempt(ada, question)
    page = feedback_page(client, attempt)
    # a verdict that says "wrong" shows its proof; what nothing proved says "not verified"
    assert "Verified wrong" in page and "Not verified" in page and "Missed" in page
    assert "Not said" in page and "Contradicted" not in page
    assert "by the grader&#x27;s checks of your sentence" in page
    assert "You said 512 KiB per token; this point expects ≈320 KiB." in page
    assert "so it is probably about bandwidth." in page  # the learner's own sentence
    assert "estimate: 50% likely covered" in page
    assert "Score: 12% — 0% verified, 12% estimated" in page


def test_an_old_result_without_verdicts_still_renders(client, ada, question):
    old = {
        "score": 0.5,
        "confidence": 0.7,
        "flags": [],
        "points": [
            {
                "index": 0,
                "hit": True,
                "similarity": 0.6,
                "concepts_found": [],
                "penalty": False,
                "weight": 2,
                "evidence": "Decode reads every weight",
                "evidence_parts": ["Decode reads every weight"],
            },
            {
                "index": 1,
                "hit": False,
                "similarity": 0.2,
                "concepts_found": [],
                "penalty": False,
                "weight": 1,
                "evidence": "",
                "evidence_parts": [],
            },
        ],
    }
    attempt = fx.graded_attempt(ada, question, old)
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Quick checks" not in page  # an old result has no attempted points to check
    assert "Hit (estimated)" in page and "Missed" in page and "the grader&#x27;s estimate" in page
    assert "Score: 50% — 0% verified, 50% estimated" in page
    assert '<mark class="evidence" data-point="1">' in page


def test_rows_read_old_and_new_points():
    lines = [
        feedback.RubricLine("a", 2),
        feedback.RubricLine("b", 1),
        feedback.RubricLine("c", 1, True),
    ]
    rows = feedback.point_rows(
        {
            "points": [
                {"index": 0, "hit": True},
                {
                    "index": 1,
                    "verdict": "unclear",
                    "estimate": 0.4,
                    "decided_by": "estimate",
                    "attempted": True,
                },
            ]
        },
        lines,
    )
    assert [r.verdict for r in rows] == ["hit", "unclear", "missed"]
    assert [r.decided_by for r in rows] == ["estimate", "estimate", "estimate"]
    assert rows[2].verdict_label == "Not said" and rows[1].verdict_label == "Not verified"
    assert rows[0].verdict_label == "Hit (estimated)"


def test_an_unproven_contradiction_stored_by_an_old_grader_shows_as_not_verified():
    # Grader 2.0 stored "contradicted" from closeness to an authored wrong version; the page
    # never shows such a verdict as wrong (issue 29) — it reads "not verified", as regrade
    # would make it.
    lines = [feedback.RubricLine("a", 1), feedback.RubricLine("flag", 1, True)]
    stored = {
        "points": [
            {
                "index": 0,
                "verdict": "contradicted",
                "decided_by": "estimate",
                "check": {"ask": "?"},
            },
            {"index": 1, "verdict": "hit", "decided_by": "estimate", "penalty": True},
        ]
    }
    rows = feedback.point_rows(stored, lines)
    assert rows[0].shown_verdict == "unclear"
    assert rows[0].verdict_label == "Not verified: answer the check"
    assert rows[1].shown_verdict == "unclear"
    assert rows[1].verdict_label == "Possibly said (not verified)"
    proven = feedback.point_rows(
        {"points": [{"index": 0, "verdict": "contradicted", "decided_by": "check"}]}, lines
    )
    assert proven[0].verdict_label == "Verified wrong"


def test_the_total_splits_verified_and_estimated():
    total = feedback.total({"verified_share": 0.645}, 0.62)
    assert total.text == "62% — 40% verified, 22% estimated"


def test_an_objection_is_stored_with_the_versions(client, ada, question):
    attempt = fx.graded_attempt(ada, question)
    response = client.post(
        f"/attempts/{attempt.pk}/objections/",
        {"point": "0", "note": "320 KiB is what I meant"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200 and "the authors will review" in response.content.decode()
    (o,) = VerdictObjection.objects.all()
    assert (o.attempt, o.point_index, o.verdict, o.status) == (attempt, 0, "contradicted", "open")
    assert o.rubric_version == "v00000000000" and o.grader_version == "2.0"
    assert o.note == "320 KiB is what I meant" and o.follow_up is None


def test_objections_are_refused_for_missing_points_and_limited_per_point(client, ada, question):
    attempt = fx.graded_attempt(ada, question)
    assert client.post(f"/attempts/{attempt.pk}/objections/", {"point": "9"}).status_code == 400
    assert client.post(f"/attempts/{attempt.pk}/objections/", {"point": "x"}).status_code == 400
    for _ in range(objections.OBJECTIONS_PER_POINT):
        assert client.post(f"/attempts/{attempt.pk}/objections/", {"point": "1"}).status_code == 302
    assert client.post(f"/attempts/{attempt.pk}/objections/", {"point": "1"}).status_code == 400
    assert VerdictObjection.objects.count() == objections.OBJECTIONS_PER_POINT


def test_accepted_objections_export_as_labelled_answers(ada, question):
    attempt = fx.graded_attempt(ada, question)
    kept = objections.objection_create(attempt=attempt, point_index=0, note="")
    objections.objection_create(attempt=attempt, point_index=1, note="")  # left open: not exported
    kept.status, kept.staff_label = VerdictObjection.Status.ACCEPTED, "partial"
    kept.save()
    out = io.StringIO()
    call_command("export_objections", stdout=out)
    data = yaml.safe_load(out.getvalue())
    (entry,) = data["questions"]
    assert entry["slug"] == fx.SLUG
    (answer,) = entry["answers"]
    assert answer == {"label": "partial", "text": fx.ANSWER + "\n", "points": [0]}
    kept.correct_verdict = "contradicted"
    kept.save()
    answer = yaml.safe_load(objections.export_yaml([kept]))["questions"][0]["answers"][0]
    assert answer["points"] == [] and answer["contradicts"] == [0]


def test_the_admin_queue_filters_and_accepts(admin_client, ada, question):
    attempt = fx.graded_attempt(ada, question)
    o = objections.objection_create(attempt=attempt, point_index=0, note="it is right")
    page = admin_client.get("/admin/trainer/verdictobjection/?status__exact=open")
    assert page.status_code == 200 and fx.SLUG in page.content.decode()
    admin_client.post(
        "/admin/trainer/verdictobjection/",
        {"action": "accept", "_selected_action": [o.pk]},
    )
    o.refresh_from_db()
    assert o.status == "accepted"
    response = admin_client.post(
        "/admin/trainer/verdictobjection/",
        {"action": "export_labelled", "_selected_action": [o.pk]},
    )
    assert yaml.safe_load(response.content)["questions"][0]["slug"] == fx.SLUG


def test_objections_are_in_the_learners_export_and_deleted_with_the_account(ada, question):
    attempt = fx.graded_attempt(ada, question)
    objections.objection_create(attempt=attempt, point_index=1, note="mine")
    data = learner_data.export(ada)
    assert data["counts"]["trainer.VerdictObjection"] == 1
    assert data["verdict_objections"][0]["note"] == "mine"
    report = learner_data.delete(ada)
    assert report.deleted["trainer.VerdictObjection"] == 1
    assert not VerdictObjection.objects.exists()


def test_a_follow_up_answer_is_autosaved_graded_and_shown(client, ada, question):
    attempt = fx.graded_attempt(ada, question)
    client.post(f"/attempts/{attempt.pk}/checks/", {"skip": "1"})
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Your answer to follow-up 1" in page and "Why not cache the queries?" in page
    assert "Your answer to follow-up 2" not in page  # no rubric: no box
    saved = client.post(f"/attempts/{attempt.pk}/follow-ups/0/draft/", {"answer": "FP8 halves"})
    assert "Draft saved" in saved.content.decode()
    assert FollowUpResponse.objects.get(attempt=attempt, index=0).draft == "FP8 halves"
    text = "With an FP8 KV cache each token takes half the bytes: about 160 KiB instead of 320 KiB."
    response = client.post(f"/attempts/{attempt.pk}/follow-ups/0/", {"answer": text})
    assert response.status_code == 302
    row = FollowUpResponse.objects.get(attempt=attempt, index=0)
    assert row.submitted is not None and row.answer == text and row.score is not None
    assert len(row.result["points"]) == 1
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Follow-up score:" in page and 'name="follow_up" value="0"' in page
    # a follow-up without a rubric, or one that does not exist, takes no answer
    assert client.post(f"/attempts/{attempt.pk}/follow-ups/1/", {"answer": "x"}).status_code == 404
    assert (
        client.post(f"/attempts/{attempt.pk}/follow-ups/7/draft/", {"answer": "x"}).status_code
        == 404
    )


def test_follow_ups_open_only_after_the_main_answer(client, ada, question):
    from trainer.models import Attempt

    attempt = Attempt.objects.create(user=ada, question=question)
    assert (
        client.post(f"/attempts/{attempt.pk}/follow-ups/0/draft/", {"answer": "x"}).status_code
        == 404
    )
