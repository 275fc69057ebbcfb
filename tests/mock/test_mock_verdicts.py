"""Verdicts in the mock: follow-up answers with a rubric are graded at the end and shown on
the scorecard like the practice feedback; the interviewer sees each point's check as a
probe to ask and, once the answer is graded, the machine's verdict as a suggestion."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from mock import services
from mock.models import FollowUpAnswer, MockInterview
from questions.models import Loop, LoopItem
from tests.trainer import checkfixtures as fx

pytestmark = pytest.mark.django_db
PASSWORD = "prefill-then-decode"
FOLLOW_UP = (
    "With an FP8 KV cache each token takes half the bytes: about 160 KiB instead of 320 KiB."
)


@pytest.fixture
def people():
    users = get_user_model().objects
    return users.create_user("ada", password=PASSWORD), users.create_user("bob", password=PASSWORD)


@pytest.fixture
def mock(people) -> MockInterview:
    loop = Loop.objects.create(slug="check-loop", title="Check loop")
    LoopItem.objects.create(loop=loop, question=fx.make_question(), order=0, minutes=10)
    mock = services.mock_start(user=people[0], loop=loop)
    mock.interviewer = people[1]
    mock.save(update_fields=["interviewer"])
    return mock


def answer_everything(mock: MockInterview) -> None:
    item = mock.items.get()
    services.answer_submit(item=item, text=fx.ANSWER)
    services.follow_up_submit(item=item, index=0, text=FOLLOW_UP)
    services.follow_up_submit(item=item, index=1, text="Queries are used once per step.")
    services.mock_finish(mock=mock)


def test_follow_ups_with_a_rubric_are_graded_and_shown_on_the_scorecard(client, mock):
    answer_everything(mock)
    graded = FollowUpAnswer.objects.get(index=0)
    assert graded.score is not None and graded.result["points"][0]["verdict"]
    unrubricked = FollowUpAnswer.objects.get(index=1)
    assert unrubricked.score is None and unrubricked.result == {}  # no rubric: nothing to grade
    client.login(username="ada", password=PASSWORD)
    page = client.get(f"/mock/{mock.pk}/scorecard/").content.decode()
    assert "Follow-up score:" in page and page.count("Follow-up score:") == 1
    assert "Halves the KV bytes per token to about 160 KiB." in page
    # the main answer's points in words: the wrong number is contradicted, with the reason
    assert "Verified wrong" in page and "You said 512 KiB per token" in page
    assert "This verdict is wrong" not in page  # objections belong to practice feedback


def test_grading_follow_ups_twice_changes_nothing(mock):
    answer_everything(mock)
    first = FollowUpAnswer.objects.get(index=0).result
    services.follow_ups_grade(item=mock.items.get())
    assert FollowUpAnswer.objects.get(index=0).result == first


def test_the_interviewer_sees_probes_and_machine_suggestions(client, mock):
    client.login(username="bob", password=PASSWORD)
    page = client.get(f"/mock/{mock.pk}/interviewer/").content.decode()
    assert f"Probe to ask: “{fx.CHOICE_ASK}” — passes: <strong>Prefill</strong>" in page
    assert "passes: <strong>320 KiB ±5%</strong>" in page
    assert "Suggestion (machine verdict" not in page  # not graded yet
    answer_everything(mock)
    page = client.get(f"/mock/{mock.pk}/interviewer/").content.decode()
    assert "Suggestion (machine verdict, not a tick): <strong>Verified wrong</strong>" in page
    assert 'type="checkbox" name="point" value="0" checked' not in page  # never ticked for them


def test_a_mock_answer_gets_no_round_of_checks(client, mock):
    answer_everything(mock)
    attempt = mock.items.get().attempt
    client.login(username="ada", password=PASSWORD)
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "Quick checks" not in page and not attempt.point_checks.exists()
    assert client.post(f"/attempts/{attempt.pk}/checks/", {"check-1": "0"}).status_code == 400
