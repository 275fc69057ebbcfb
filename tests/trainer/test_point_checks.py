"""Point checks after a written answer: which points are offered, what a passed or failed
check does to the verdict and the score, and what the check endpoint refuses."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from tests.trainer import checkfixtures as fx
from trainer import point_checks
from trainer.models import PointCheck

pytestmark = pytest.mark.django_db
PASSWORD = "prefill-then-decode"


@pytest.fixture
def ada(client):
    user = get_user_model().objects.create_user("ada", password=PASSWORD)
    client.login(username="ada", password=PASSWORD)
    return user


@pytest.fixture
def attempt(ada):
    return fx.graded_attempt(ada, fx.make_question())


def opened(client, attempt) -> dict[int, PointCheck]:
    """Open the attempt page (which offers the round) and return the offers by point."""
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Quick checks" in page
    return {c.point_index: c for c in attempt.point_checks.all()}


def choose(check: PointCheck, option: str) -> str:
    return str(check.options.index(option))


def test_only_attempted_unclear_or_contradicted_points_with_a_check_are_offered(client, attempt):
    checks = opened(client, attempt)
    # 0 contradicted and 1 unclear were attempted; 3 has a check but was not attempted; 2 is a red flag
    assert sorted(checks) == [0, 1]
    assert checks[0].kind == "number" and checks[0].unit == "KiB"
    assert sorted(checks[1].options) == ["Both", "Decode", "Neither", "Prefill"]
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert fx.CHOICE_ASK in page and fx.NUMBER_ASK in page and "How many KV heads" not in page


def test_options_are_shuffled_the_same_way_for_the_same_attempt(client, attempt, ada):
    first = opened(client, attempt)[1].options
    spec_options = [p for p in first]
    again = point_checks.checks_round(attempt=attempt).checks[1].options
    assert again == first == spec_options
    other = fx.graded_attempt(ada, attempt.question)
    orders = {
        tuple(point_checks.checks_round(attempt=a).checks[1].options)
        for a in [other, *[fx.graded_attempt(ada, attempt.question) for _ in range(6)]]
    }
    assert len(orders) > 1  # a different attempt may see another order


def test_passed_checks_make_points_hit_by_check_and_the_score_rises(client, attempt):
    checks = opened(client, attempt)
    response = client.post(
        f"/attempts/{attempt.pk}/checks/",
        {"check-0": "0.3125 MiB", "check-1": choose(checks[1], "Prefill")},
    )
    assert response.status_code == 302
    attempt.refresh_from_db()
    points = {p["index"]: p for p in attempt.result["points"]}
    assert points[0]["verdict"] == "hit" and points[0]["decided_by"] == "check"
    assert points[1]["verdict"] == "hit" and points[1]["decided_by"] == "check"
    assert points[3]["verdict"] == "missed"  # never offered, never changed
    assert attempt.score == pytest.approx(3 / 4)
    assert attempt.result["verified_share"] == pytest.approx(1.0)
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Score: 75% — 75% verified, 0% estimated" in page
    assert "by your check" in page and "Verified hit" in page


def test_a_failed_check_contradicts_with_the_reason_and_a_blank_changes_nothing(client, attempt):
    checks = opened(client, attempt)
    response = client.post(
        f"/attempts/{attempt.pk}/checks/", {"check-0": "", "check-1": choose(checks[1], "Decode")}
    )
    assert response.status_code == 302
    attempt.refresh_from_db()
    points = {p["index"]: p for p in attempt.result["points"]}
    assert points[1]["verdict"] == "contradicted"
    assert points[1]["reason"] == "check: you chose “Decode”"
    assert points[0]["verdict"] == "contradicted" and points[0]["decided_by"] == "verify"
    assert points[0]["reason"].startswith("You said 512 KiB")
    assert attempt.score == 0.0


def test_a_wrong_number_fails_its_check(client, attempt):
    opened(client, attempt)
    client.post(f"/attempts/{attempt.pk}/checks/", {"check-0": "512 KiB"})
    attempt.refresh_from_db()
    assert attempt.result["points"][0]["verdict"] == "contradicted"
    assert attempt.result["points"][0]["reason"] == "check: you answered 512 KiB"
    assert PointCheck.objects.get(attempt=attempt, point_index=0).passed is False


def test_a_check_for_a_point_not_offered_is_refused_and_nothing_changes(client, attempt):
    opened(client, attempt)
    response = client.post(f"/attempts/{attempt.pk}/checks/", {"check-3": "0"})
    assert response.status_code == 400
    assert "No check was offered for point 4" in response.content.decode()
    attempt.refresh_from_db()
    assert attempt.score == 0.125
    assert not attempt.point_checks.filter(answered__isnull=False).exists()


def test_checks_are_refused_before_any_were_offered(client, attempt):
    response = client.post(f"/attempts/{attempt.pk}/checks/", {"check-0": "320 KiB"})
    assert response.status_code == 400


def test_a_second_answer_is_refused_the_first_stands(client, attempt):
    checks = opened(client, attempt)
    client.post(f"/attempts/{attempt.pk}/checks/", {"check-1": choose(checks[1], "Decode")})
    response = client.post(
        f"/attempts/{attempt.pk}/checks/", {"check-1": choose(checks[1], "Prefill")}
    )
    assert response.status_code == 409
    assert "already answered" in response.content.decode()
    attempt.refresh_from_db()
    assert attempt.result["points"][1]["verdict"] == "contradicted"


def test_answers_after_the_window_and_grace_are_refused(client, attempt):
    checks = opened(client, attempt)
    late = timezone.now() - timedelta(
        seconds=point_checks.CHECK_WINDOW_S + point_checks.CHECK_GRACE_S + 1
    )
    PointCheck.objects.filter(attempt=attempt).update(offered=late)
    response = client.post(
        f"/attempts/{attempt.pk}/checks/", {"check-1": choose(checks[1], "Prefill")}
    )
    assert response.status_code == 409
    assert "Time is up" in response.content.decode()
    attempt.refresh_from_db()
    assert attempt.result["points"][1]["verdict"] == "unclear" and attempt.score == 0.125
    assert not attempt.point_checks.filter(answered__isnull=True).exists()  # the round closed


def test_an_answer_within_the_grace_counts(client, attempt):
    checks = opened(client, attempt)
    just_late = timezone.now() - timedelta(seconds=point_checks.CHECK_WINDOW_S + 1)
    PointCheck.objects.filter(attempt=attempt).update(offered=just_late)
    response = client.post(
        f"/attempts/{attempt.pk}/checks/", {"check-1": choose(checks[1], "Prefill")}
    )
    assert response.status_code == 302


@pytest.mark.parametrize("value", ["7", "x", "-1", "prefill"])
def test_an_option_that_was_not_shown_is_refused(client, attempt, value):
    opened(client, attempt)
    response = client.post(f"/attempts/{attempt.pk}/checks/", {"check-1": value})
    assert response.status_code == 400
    assert not attempt.point_checks.filter(answered__isnull=False).exists()


def test_an_unreadable_number_is_refused_with_the_reason_unless_time_is_up(client, attempt):
    opened(client, attempt)
    response = client.post(f"/attempts/{attempt.pk}/checks/", {"check-0": "lots of KiB"})
    assert response.status_code == 400
    assert not attempt.point_checks.filter(answered__isnull=False).exists()
    response = client.post(
        f"/attempts/{attempt.pk}/checks/", {"check-0": "lots of KiB", "final": "1"}
    )
    assert response.status_code == 302  # the time-out post: unreadable counts as unanswered
    attempt.refresh_from_db()
    assert attempt.result["points"][0]["verdict"] == "contradicted"
    assert attempt.result["points"][0]["decided_by"] == "verify"


def test_a_malformed_field_name_is_refused(client, attempt):
    opened(client, attempt)
    assert client.post(f"/attempts/{attempt.pk}/checks/", {"check-x": "1"}).status_code == 400


def test_someone_elses_attempt_is_not_found(client, attempt):
    opened(client, attempt)
    get_user_model().objects.create_user("bob", password=PASSWORD)
    client.login(username="bob", password=PASSWORD)
    assert client.post(f"/attempts/{attempt.pk}/checks/", {"check-0": "320 KiB"}).status_code == 404


def test_skipping_closes_the_round_and_shows_the_feedback(client, attempt):
    opened(client, attempt)
    assert client.post(f"/attempts/{attempt.pk}/checks/", {"skip": "1"}).status_code == 302
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Quick checks" not in page and "Score: 12% — 0% verified, 12% estimated" in page


def test_a_round_past_its_time_shows_the_feedback(client, attempt):
    opened(client, attempt)
    PointCheck.objects.filter(attempt=attempt).update(offered=timezone.now() - timedelta(minutes=5))
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Quick checks" not in page and "Score:" in page


def test_no_checks_for_an_answer_with_nothing_to_check(client, ada):
    question = fx.make_question()
    result = fx.graded_result(question)
    for p in result["points"]:
        p["attempted"] = False
    attempt = fx.graded_attempt(ada, question, result)
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Quick checks" not in page and not attempt.point_checks.exists()
