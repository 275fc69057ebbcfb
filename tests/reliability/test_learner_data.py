"""Learner data export and deletion (`export_learner_data`, `delete_learner_data`).

A learner (ada) gets a row in every model that holds learner data, through the services
the site itself uses: a graded scenario attempt (with a check, a follow-up answer and an
objection to a verdict) and an arithmetic attempt with a hint and a
step answer, fsrs review state, a lab run executed with its points (and its Redis stream), a
finished mock interview with follow-ups, an interviewer (bob) who marked it and a live
stream, ada as the interviewer of cy's mock, a group, a permission, an admin log entry and
a login session. The export must contain each piece; the deletion must leave no row
referencing ada and leave bob's and cy's data as it was (bar cy's interviewer seat).
"""

from __future__ import annotations

import builtins
import json
from io import StringIO

import pytest
from django.apps import apps
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models.deletion import CASCADE
from django.test import Client
from django.utils import timezone

import common.redis
from lab import broker, runner
from lab import services as lab_services
from lab.labs import LABS
from lab.labs.base import Chart, Lab, Param, Point, Series
from mock import live
from mock import services as mock_services
from questions.models import Loop, Question
from trainer import learner_data, objections
from trainer import services as practice
from trainer.models import FollowUpResponse, PointCheck

pytestmark = pytest.mark.django_db
PASSWORD = "prefill-then-decode"
SCENARIO_ANSWER = "Prefill is compute-bound; decode is memory-bandwidth-bound: ADA-SCENARIO-MARK"
UNSENT = "ADA-UNSENT-DRAFT: a draft never submitted"
FOLLOW_UP = "ADA-FOLLOW-UP: at 32K the prefill grows quadratically in attention"
NOTES = "BOB-NOTES: clear on prefill vs decode"
ADA_NOTES_ON_CY = "ADA-NOTES-ON-CY: good"
OBJECTION = "ADA-OBJECTION: point 1 was right"


class Squares(Lab):
    slug = "test-squares"
    title = "n points of y = x²"
    summary = "test double"
    topics = ()
    params = (Param("n", "n", "int", 4, min=1, max=50),)
    series = (Series("s", "s"),)
    chart = Chart("x", "y")

    def run(self, ctx):
        for i in range(ctx.params["n"]):
            yield Point("s", i, i * i)


def owned_models() -> set[str]:
    """Models a learner's rows live in: each declared owned user reference, and every model
    that cascades from one of them (derived, so a new child model is covered too)."""
    found = {
        f.model._meta.label
        for f in learner_data.user_reference_fields()
        if learner_data.USER_REFERENCES[learner_data.field_label(f)] == learner_data.OWNED
    }
    grew = True
    while grew:
        grew = False
        for model in apps.get_models(include_auto_created=True):
            for f in model._meta.get_fields():
                if (
                    f.concrete
                    and f.is_relation
                    and (f.many_to_one or f.one_to_one)
                    and f.remote_field.on_delete is CASCADE
                    and f.related_model._meta.label in found
                    and model._meta.label not in found
                ):
                    found.add(model._meta.label)
                    grew = True
    return found


@pytest.fixture
def world(settings, redis_url, monkeypatch, django_capture_on_commit_callbacks):
    settings.REDIS_URL = redis_url
    settings.MOCK_TIME_SCALE = 1.0
    call_command("load_bank", verbosity=0)
    users = get_user_model().objects
    ada = users.create_user("ada", email="ada@example.com", password=PASSWORD)
    ada.first_name = "Ada"
    ada.save()
    bob = users.create_user("bob", password=PASSWORD)
    cy = users.create_user("cy", password=PASSWORD)

    # Practice: a graded scenario attempt (real grader) → fsrs card + log.
    scenario = Question.objects.published().filter(kind=Question.Kind.SCENARIO).first()
    attempt = practice.attempt_start(user=ada, question=scenario)
    practice.draft_save(attempt=attempt, text="half-typed draft")
    practice.attempt_submit(attempt=attempt, answer=SCENARIO_ANSWER)
    # After it: a check offered, a follow-up answer and an objection to a verdict (rows made
    # here: whether the grader leaves a point to check, or a follow-up has a rubric, depends
    # on the bank), the objection through the service the page uses.
    attempt.refresh_from_db()
    PointCheck.objects.create(
        attempt=attempt, point_index=0, kind="choice", ask="Which phase?", options=["A", "B"],
        verdict_before="unclear", offered=timezone.now(),
    )  # fmt: skip
    FollowUpResponse.objects.create(attempt=attempt, index=0, prompt="And then?", draft=UNSENT)
    objections.objection_create(attempt=attempt, point_index=0, note=OBJECTION)
    other = Question.objects.published().filter(kind=Question.Kind.SCENARIO)[1]
    practice.draft_save(attempt=practice.attempt_start(user=ada, question=other), text=UNSENT)
    # An arithmetic attempt: a hint and one step answer; left unsubmitted, with a draft.
    arithmetic = Question.objects.published().filter(kind=Question.Kind.ARITHMETIC).first()
    sums = practice.attempt_start(user=ada, question=arithmetic, seed=7)
    step = practice.attempt_context(sums).problem.steps[0]
    practice.hint_reveal(attempt=sums, step_name=step.name)
    practice.step_answer_submit(attempt=sums, step_name=step.name, raw=f"12345 {step.unit}")

    # A lab run through the lab services, executed in-process: points in the DB and in its
    # Redis stream (a small stand-in lab: the bundled labs have their own tests).
    monkeypatch.setitem(LABS, Squares.slug, Squares())
    run = lab_services.start_run(ada, Squares.slug, {"n": 8})
    assert runner.execute_run(run.pk, "worker-test") == "done"

    # Ada's mock, interviewed and marked by bob, finished (graded) with a follow-up.
    loop = Loop.objects.get(slug="inference-warm-up")
    mock = mock_services.mock_start(user=ada, loop=loop)
    invite = mock_services.invite_create(mock=mock, user=ada)
    mock_services.invite_accept(token=invite.token, user=bob)
    item = mock_services.mock_current(mock=mock)
    mock_services.draft_save(item=item, slot="main", text="typing live")  # → live stream
    mock_services.answer_submit(item=item, text=SCENARIO_ANSWER)
    item.refresh_from_db()
    mock_services.follow_up_submit(item=item, index=0, text=FOLLOW_UP)
    mock_services.interviewer_mark(item=item, user=bob, points=[0], notes=NOTES)
    mock_services.mock_finish(mock=mock)
    # Cy's mock, interviewed by ada (other people's rows that mention ada).
    cy_mock = mock_services.mock_start(user=cy, loop=loop)
    cy_invite = mock_services.invite_create(mock=cy_mock, user=cy)
    mock_services.invite_accept(token=cy_invite.token, user=ada)
    cy_item = mock_services.mock_current(mock=cy_mock)
    # Live notices go out once the draft is committed: run them as a commit would.
    with django_capture_on_commit_callbacks(execute=True):
        mock_services.draft_save(item=cy_item, slot="main", text="cy typing")
    mock_services.interviewer_mark(item=cy_item, user=ada, points=[], notes=ADA_NOTES_ON_CY)
    # Bob's own practice: must survive ada's deletion untouched.
    practice.draft_save(attempt=practice.attempt_start(user=bob, question=scenario), text="bob")

    # Auth odds and ends: a group, a permission, an admin log entry, a login session each.
    group = Group.objects.create(name="cohort-7")
    ada.groups.add(group)
    bob.groups.add(group)
    ada.user_permissions.add(Permission.objects.get(codename="view_question"))
    LogEntry.objects.create(
        user=ada,
        content_type=ContentType.objects.get_for_model(Question),
        object_id=str(scenario.pk),
        object_repr=str(scenario),
        action_flag=ADDITION,
    )
    Client().force_login(ada)
    Client().force_login(bob)
    return {"ada": ada, "bob": bob, "cy": cy, "run": run, "mock": mock, "cy_mock": cy_mock}


def export(username: str, tmp_path) -> dict:
    out = tmp_path / f"{username}.json"
    call_command("export_learner_data", username, "--out", str(out))
    return json.loads(out.read_text())


def test_every_reference_to_users_is_declared():
    assert learner_data.uncovered_references() == []


def test_an_undeclared_reference_is_reported(monkeypatch):
    monkeypatch.delitem(learner_data.USER_REFERENCES, "lab.LabRun.owner")
    monkeypatch.setitem(learner_data.USER_REFERENCES, "mock.MockInvite.used_by", "owned")
    problems = learner_data.uncovered_references()
    assert any(p.startswith("lab.LabRun.owner references users but is not") for p in problems)
    assert any(
        "mock.MockInvite.used_by is declared owned but its on_delete is SET_NULL" in p
        for p in problems
    )
    with pytest.raises(CommandError, match=r"lab\.LabRun\.owner"):
        learner_data.ensure_covered()


def test_export_holds_everything_and_delete_removes_it_all(world, tmp_path, monkeypatch):
    ada, bob = world["ada"], world["bob"]
    redis = common.redis.client()
    ada_keys = [broker.stream_key(world["run"].pk), live.key(world["mock"].pk)]
    assert all(redis.exists(k) for k in ada_keys), "the world should have ada's streams"
    assert redis.exists(live.key(world["cy_mock"].pk))

    data = export("ada", tmp_path)
    text = json.dumps(data)
    # The account, without the password hash.
    assert data["account"]["fields"]["username"] == "ada"
    assert data["account"]["fields"]["email"] == "ada@example.com"
    assert "password" not in data["account"]["fields"] and ada.password not in text
    # A row in every model that holds learner data (derived from the schema).
    rows = data["rows"]
    missing = {label for label in owned_models() if not rows.get(label)}
    assert not missing, f"the export (or this test's world) lacks rows of {missing}"
    assert set(rows) <= owned_models()
    # Attempts with answers, drafts and grades; steps and hints; fsrs state.
    attempts = [r["fields"] for r in rows["trainer.Attempt"]]
    graded = next(a for a in attempts if a["answer"] == SCENARIO_ANSWER and a["graded"])
    assert graded["score"] is not None and graded["result"]
    assert any(a["hints"] for a in attempts) and any(a["draft"] == UNSENT for a in attempts)
    assert rows["trainer.StepAnswer"][0]["fields"]["raw"].startswith("12345")
    assert rows["trainer.ReviewCard"][0]["fields"]["card"]["stability"] is not None
    assert rows["trainer.ReviewLog"][0]["fields"]["rating"] in {1, 2, 3, 4}
    # Checks, follow-up answers, objections (rows, and the objections as a section).
    assert rows["trainer.VerdictObjection"][0]["fields"]["note"] == OBJECTION
    assert data["verdict_objections"][0]["note"] == OBJECTION
    assert rows["trainer.FollowUpResponse"][0]["fields"]["draft"] == UNSENT
    # Lab runs with params and points.
    run = rows["lab.LabRun"][0]["fields"]
    assert run["params"] == {"n": 8} and run["status"] == "done"
    assert [p["fields"]["y"] for p in rows["lab.LabPoint"]] == [i * i for i in range(8)]
    # Mock: follow-up answers, the interviewer's notes, the invite, the scorecard.
    assert rows["mock.FollowUpAnswer"][0]["fields"]["answer"] == FOLLOW_UP
    assert any(r["fields"]["interviewer_notes"] == NOTES for r in rows["mock.MockItem"])
    assert rows["mock.MockInvite"][0]["fields"]["used_by"] == bob.pk
    (card,) = data["scorecards"]
    assert card["mock"] == world["mock"].pk and card["verdict"] and card["items"]
    assert card["items"][0]["interviewer_notes"] == NOTES
    # What ada wrote as cy's interviewer, and where ada is mentioned in others' rows.
    assert data["interviewer_notes"][0]["interviewer_notes"] == ADA_NOTES_ON_CY
    assert data["mentioned_in"]["mock.MockInterview.interviewer"] == [world["cy_mock"].pk]
    assert data["active_sessions"] == 1
    assert data["counts"]["trainer.Attempt"] == len(rows["trainer.Attempt"])

    bob_before = export("bob", tmp_path)["rows"]
    cy_before = export("cy", tmp_path)["rows"]
    sessions_before = Session.objects.count()

    # Refusals first: no confirmation, then a staff account without --force.
    monkeypatch.setattr(builtins, "input", lambda prompt="": "not-ada")
    with pytest.raises(CommandError, match="Not confirmed"):
        call_command("delete_learner_data", "ada")
    get_user_model().objects.filter(pk=bob.pk).update(is_staff=True)
    with pytest.raises(CommandError, match="staff/superuser account; refusing without --force"):
        call_command("delete_learner_data", "bob", "--yes")
    get_user_model().objects.filter(pk=bob.pk).update(is_staff=False)
    assert get_user_model().objects.filter(pk=ada.pk).exists()

    out = StringIO()
    monkeypatch.setattr(builtins, "input", lambda prompt="": "ada")
    call_command("delete_learner_data", "ada", stdout=out)
    printed = out.getvalue().split("Deleted 'ada':")[1]
    for label, n in data["counts"].items():
        assert f"  {label}: {n}" in printed, printed
    assert "sessions: 1" in printed and "redis streams: 2" in printed

    # Nothing left that references ada, or that was hers.
    assert not get_user_model().objects.filter(pk=ada.pk).exists()
    for f in learner_data.user_reference_fields():
        assert not f.model._default_manager.filter(**{f.attname: ada.pk}).exists(), f
    for label, objs in rows.items():
        model = apps.get_model(label)
        assert not model._default_manager.filter(pk__in=[o["pk"] for o in objs]).exists()
    assert Session.objects.count() == sessions_before - 1
    assert not any(redis.exists(k) for k in ada_keys)
    assert redis.exists(live.key(world["cy_mock"].pk))

    # Bob's data is as it was; cy's too, bar the interviewer seat ada held.
    assert export("bob", tmp_path)["rows"] == bob_before
    for row in cy_before["mock.MockInterview"]:
        row["fields"]["interviewer"] = None
    for row in cy_before["mock.MockInvite"]:
        row["fields"]["used_by"] = None
    assert export("cy", tmp_path)["rows"] == cy_before


def test_an_unknown_learner_is_explained():
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("export_learner_data", "nobody")
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("delete_learner_data", "nobody", "--yes")


def test_the_export_is_refused_while_a_reference_is_undeclared(monkeypatch):
    user = get_user_model().objects.create_user("eve", password=PASSWORD)
    monkeypatch.delitem(learner_data.USER_REFERENCES, "trainer.ReviewCard.user")
    with pytest.raises(CommandError, match=r"trainer\.ReviewCard\.user references users"):
        call_command("export_learner_data", "eve")
    with pytest.raises(CommandError, match=r"trainer\.ReviewCard\.user references users"):
        call_command("delete_learner_data", "eve", "--yes")
    assert get_user_model().objects.filter(pk=user.pk).exists()
