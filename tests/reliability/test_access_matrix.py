"""Access matrix: every URL pattern the resolver knows (admin included) × every kind of
visitor, GET and, for URLs that change state, POST. A URL added without a row here fails
`test_every_url_pattern_has_a_row`.

Visitors (columns):
  anon    not signed in
  A       the learner who owns the objects: a scenario attempt with a draft, an arithmetic
          attempt, a running lab run, a mock interview (with an invite and an interviewer)
  B       another learner
  I       the interviewer: a learner who joined A's mock through its invite link
  author  staff in the Authors group (edits the question bank in the admin)
  staff   superuser (operator)

Expected outcomes: a status code, `login` (302 to /accounts/login/), `admin` (302 to
/admin/login/) or `302` (any other redirect). 405 = method not allowed, answered before any
object is looked up.

Rules checked besides the table: B, I and author never get a 2xx/3xx on A's objects (except
I on the mock A invited them to), and none of anon, B and author changes anything of A's in
the database (compared row by row before and after).
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.cache import caches
from django.core.management import call_command
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from lab.models import LabPoint, LabRun
from mock import services as mock_services
from mock.models import FollowUpAnswer, MockInterview, MockInvite, MockItem
from questions.models import Loop, LoopItem, Question, Topic
from trainer import services
from trainer.demo import authors_group_ensure
from trainer.models import (
    Attempt,
    FollowUpResponse,
    PointCheck,
    ReviewCard,
    StepAnswer,
    VerdictObjection,
)

ROLES = ("anon", "A", "B", "I", "author", "staff")

# fmt: off
MATRIX = """
# url name (or route)                         method  anon   A      B      I      author staff
home                                          GET     200    200    200    200    200    200
healthz                                       GET     200    200    200    200    200    200
favicon                                       GET     302    302    302    302    302    302
login                                         GET     200    200    200    200    200    200
login                                         POST    200    200    200    200    200    200
logout                                        GET     405    405    405    405    405    405
logout                                        POST    302    302    302    302    302    302
signup                                        GET     200    302    302    302    302    302
signup                                        POST    200    302    302    302    302    302
# accounts: the profile and password change are the visitor's own (no object in the URL)
profile                                       GET     login  200    200    200    200    200
profile                                       POST    login  302    302    302    302    302
password_change                               GET     login  200    200    200    200    200
password_change                               POST    login  200    200    200    200    200
password_reset                                GET     200    200    200    200    200    200
password_reset                                POST    200    200    200    200    200    200
password_reset_done                           GET     200    200    200    200    200    200
password_reset_confirm                        GET     200    200    200    200    200    200
password_reset_confirm                        POST    200    200    200    200    200    200
password_reset_complete                       GET     200    200    200    200    200    200
questions:topic                               GET     200    200    200    200    200    200
practice_start                                GET     login  302    302    302    302    302
progress                                      GET     login  200    200    200    200    200
practice                                      GET     login  302    302    302    302    302
practice_new                                  GET     login  405    405    405    405    405
practice_new                                  POST    login  302    302    302    302    302
# A's scenario attempt (with a draft): nobody else reads or writes it
attempt                                       GET     login  200    404    404    404    404
draft                                         GET     login  405    405    405    405    405
draft                                         POST    login  200    404    404    404    404
submit                                        GET     login  405    405    405    405    405
submit                                        POST    login  400    404    404    404    404
regrade                                       GET     login  405    405    405    405    405
regrade                                       POST    login  302    404    404    404    404
self_assess                                   GET     login  405    405    405    405    405
self_assess                                   POST    login  302    404    404    404    404
checks                                        GET     login  405    405    405    405    405
checks                                        POST    login  400    404    404    404    404
objection                                     GET     login  405    405    405    405    405
objection                                     POST    login  400    404    404    404    404
follow_up_draft                               GET     login  405    405    405    405    405
follow_up_draft                               POST    login  404    404    404    404    404
follow_up_submit                              GET     login  405    405    405    405    405
follow_up_submit                              POST    login  404    404    404    404    404
# A's arithmetic attempt
step_submit                                   GET     login  405    405    405    405    405
step_submit                                   POST    login  200    404    404    404    404
step_hint                                     GET     login  405    405    405    405    405
step_hint                                     POST    login  200    404    404    404    404
# the lab: A's running run; the queue is for operators (staff), not authors
lab_catalog                                   GET     login  200    200    200    200    200
lab_my_runs                                   GET     login  200    200    200    200    200
lab_queue                                     GET     login  403    403    403    403    200
lab_run                                       GET     login  200    404    404    404    200
lab_run_points_csv                            GET     login  200    404    404    404    200
lab_run_events                                GET     403    200    404    404    404    200
lab_run_cancel                                GET     login  405    405    405    405    405
lab_run_cancel                                POST    login  302    404    404    404    302
lab_form                                      GET     login  200    200    200    200    200
lab_form                                      POST    login  302    302    302    302    302
# mock interviews: A's mock; I joined it through the invite
mock_home                                     GET     login  200    200    200    200    200
mock_loop                                     GET     login  200    200    200    200    200
mock_start                                    GET     login  405    405    405    405    405
mock_start                                    POST    login  302    302    302    302    302
mock_run                                      GET     login  200    404    404    404    404
mock_scorecard                                GET     login  302    404    302    404    404
mock_scorecard                                POST    login  302    404    302    404    404
mock_invite                                   GET     login  405    405    405    405    405
mock_invite                                   POST    login  302    404    404    404    404
mock_draft                                    GET     login  405    405    405    405    405
mock_draft                                    POST    login  200    404    404    404    404
mock_answer                                   GET     login  405    405    405    405    405
mock_answer                                   POST    login  302    404    404    404    404
mock_steps                                    GET     login  405    405    405    405    405
mock_steps                                    POST    login  302    404    404    404    404
mock_follow_up                                GET     login  405    405    405    405    405
mock_follow_up                                POST    login  302    404    404    404    404
mock_next                                     GET     login  405    405    405    405    405
mock_next                                     POST    login  302    404    404    404    404
mock_join                                     GET     login  403    403    302    403    403
mock_join                                     POST    login  403    403    302    403    403
mock_interviewer                              GET     login  404    404    200    404    404
mock_events                                   GET     403    404    404    200    404    404
mock_mark                                     GET     login  405    405    405    405    405
mock_mark                                     POST    login  404    404    200    404    404
mock_finish                                   GET     login  405    405    405    405    405
mock_finish                                   POST    login  302    404    404    404    404
# the admin: authors edit the question bank; users and groups are for superusers
admin_login                                   GET     200    200    200    200    302    302
admin_login                                   POST    200    200    200    200    200    200
admin:index                                   GET     admin  admin  admin  admin  200    200
admin:login                                   GET     200    200    200    200    302    302
admin:login                                   POST    200    200    200    200    200    200
admin:logout                                  GET     302    302    302    302    405    405
admin:logout                                  POST    302    302    302    302    302    302
admin:password_change                         GET     admin  admin  admin  admin  200    200
admin:password_change                         POST    admin  admin  admin  admin  200    200
admin:password_change_done                    GET     admin  admin  admin  admin  200    200
admin:autocomplete                            GET     admin  admin  admin  admin  403    403
admin:jsi18n                                  GET     admin  admin  admin  admin  200    200
admin:view_on_site                            GET     admin  admin  admin  admin  404    404
admin:app_list                                GET     admin  admin  admin  admin  200    200
admin/(?P<url>.*)$                            GET     admin  admin  admin  admin  404    404
admin:auth_group_changelist                   GET     admin  admin  admin  admin  403    200
admin:auth_group_add                          GET     admin  admin  admin  admin  403    200
admin:auth_group_add                          POST    admin  admin  admin  admin  403    200
admin:auth_group_history                      GET     admin  admin  admin  admin  403    200
admin:auth_group_delete                       GET     admin  admin  admin  admin  403    200
admin:auth_group_delete                       POST    admin  admin  admin  admin  403    200
admin:auth_group_change                       GET     admin  admin  admin  admin  403    200
admin:auth_group_change                       POST    admin  admin  admin  admin  403    200
admin/auth/group/<path:object_id>/            GET     admin  admin  admin  admin  302    302
admin:auth_user_password_change               GET     admin  admin  admin  admin  403    200
admin:auth_user_password_change               POST    admin  admin  admin  admin  403    200
admin:auth_user_changelist                    GET     admin  admin  admin  admin  403    200
admin:auth_user_add                           GET     admin  admin  admin  admin  403    200
admin:auth_user_add                           POST    admin  admin  admin  admin  403    200
admin:auth_user_history                       GET     admin  admin  admin  admin  403    200
admin:auth_user_delete                        GET     admin  admin  admin  admin  403    200
admin:auth_user_delete                        POST    admin  admin  admin  admin  403    200
admin:auth_user_change                        GET     admin  admin  admin  admin  403    200
admin:auth_user_change                        POST    admin  admin  admin  admin  403    200
admin/auth/user/<path:object_id>/             GET     admin  admin  admin  admin  302    302
admin:questions_question_preview              GET     admin  admin  admin  admin  200    200
admin:questions_question_preview              POST    admin  admin  admin  admin  200    200
admin:questions_problem_preview               GET     admin  admin  admin  admin  200    200
admin:questions_problem_preview               POST    admin  admin  admin  admin  200    200
# trying a rubric on pasted answers: staff (authors and operators)
try_rubric                                    GET     admin  admin  admin  admin  200    200
try_rubric                                    POST    admin  admin  admin  admin  200    200
# learners' objections to verdicts: authors review them; nobody adds or deletes one here
admin:trainer_verdictobjection_changelist     GET     admin  admin  admin  admin  200    200
admin:trainer_verdictobjection_add            GET     admin  admin  admin  admin  403    403
admin:trainer_verdictobjection_history        GET     admin  admin  admin  admin  200    200
admin:trainer_verdictobjection_delete         GET     admin  admin  admin  admin  403    200
admin:trainer_verdictobjection_change         GET     admin  admin  admin  admin  200    200
admin:trainer_verdictobjection_change         POST    admin  admin  admin  admin  200    200
admin/trainer/verdictobjection/<path:object_id>/  GET admin  admin  admin  admin  302    302
"""
# fmt: on

# The question-bank models: the same row for each (authors and staff may do everything).
BANK_MODELS = ("topic", "question", "problem", "step", "loop")
BANK_ROWS = """
admin:questions_{m}_changelist                GET     admin  admin  admin  admin  200    200
admin:questions_{m}_add                       GET     admin  admin  admin  admin  200    200
admin:questions_{m}_add                       POST    admin  admin  admin  admin  200    200
admin:questions_{m}_history                   GET     admin  admin  admin  admin  200    200
admin:questions_{m}_delete                    GET     admin  admin  admin  admin  200    200
admin:questions_{m}_delete                    POST    admin  admin  admin  admin  200    200
admin:questions_{m}_change                    GET     admin  admin  admin  admin  200    200
admin:questions_{m}_change                    POST    admin  admin  admin  admin  200    200
admin/questions/{m}/<path:object_id>/         GET     admin  admin  admin  admin  302    302
"""


def parse(text: str) -> dict[tuple[str, str], dict[str, str]]:
    rows = {}
    for line in text.strip().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, method, *cells = line.split()
        assert len(cells) == len(ROLES), line
        assert (key, method) not in rows, f"duplicate row {key} {method}"
        rows[(key, method)] = dict(zip(ROLES, cells, strict=True))
    return rows


EXPECTED = parse(MATRIX + "".join(BANK_ROWS.format(m=m) for m in BANK_MODELS))

# Form data sent with each POST (the same for every visitor: if B's request got through,
# A's data would change and the snapshot comparison would catch it).
POST_DATA = {
    "draft": {"answer": "written by someone else"},
    "submit": {"answer": ""},
    "self_assess": {"point": ["0", "1"]},
    "step_submit": {"answer": "12 TFLOP"},
    "mock_draft": {"slot": "main", "answer": "written by someone else"},
    "mock_answer": {"answer": "an answer from someone else"},
    "mock_steps": {"step:prefill_tflop": "12 TFLOP"},
    "mock_follow_up": {"answer": "a probe answer"},
    "mock_next": {"main": "moving on"},
    "mock_mark": {"point": ["0"], "notes": "marked"},
    "lab_run_cancel": {"next": "/lab/runs/"},
    "checks": {"check:0": "0"},
    "objection": {"point": "0", "note": "not mine"},
    "follow_up_draft": {"answer": "written by someone else"},
    "follow_up_submit": {"answer": "written by someone else"},
    "try_rubric": {"answers": "The KV cache grows with context."},
}

# URL kwargs that name one of A's objects, and whose rows must refuse B and the author.
A_OBJECT_KWARGS = {"attempt_id", "run_id", "mock_id", "token"}
# What the interviewer of A's mock may open (the scorecard sends them to their own page).
INTERVIEWER_PAGES = {"mock_interviewer", "mock_events", "mock_mark", "mock_scorecard"}


def walk(resolver: URLResolver, prefix: str = "", namespace: str = ""):
    """(key, route, name) for every URL pattern, recursively; key = name or route."""
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            ns = ":".join(x for x in (namespace, p.namespace) if x)
            yield from walk(p, prefix + str(p.pattern), ns)
        elif isinstance(p, URLPattern):
            name = f"{namespace}:{p.name}" if namespace and p.name else (p.name or "")
            route = prefix + str(p.pattern)
            yield (name or route), route, name


@pytest.fixture
def world(settings, redis_url):
    """A's objects and the six visitors' clients."""
    settings.LAB_STALE_SECONDS = 3600  # A's run stays "running" whatever the clock says
    call_command("load_bank", "questions/bank/inference-basics.yaml", verbosity=0)
    users = get_user_model().objects  # no passwords (no hashing): clients use force_login
    a = users.create_user("ada")
    b = users.create_user("bob")
    i = users.create_user("ivy")
    author = users.create_user("writer", is_staff=True)
    author.groups.add(authors_group_ensure())
    staff = users.create_superuser("root", email=None, password=None)

    scenario = Question.objects.get(slug="inference-basics-request-lifecycle")
    arithmetic = Question.objects.get(slug="inference-basics-two-phase-timing")
    attempt = services.attempt_start(user=a, question=scenario)
    services.draft_save(attempt=attempt, text="A's draft: prefill then decode")
    steps_attempt = services.attempt_start(user=a, question=arithmetic)
    step = arithmetic.problem.steps.order_by("order").first()

    now = timezone.now()
    run = LabRun.objects.create(
        owner=a, lab="kv-cache-growth", params={"tokens": 64}, status=LabRun.Status.RUNNING,
        started=now, heartbeat=now, worker="lab@test", task_id="t-1",
    )  # fmt: skip
    LabPoint.objects.create(run=run, seq=0, series="gqa", x=16, y=16384)

    objection = VerdictObjection.objects.create(
        attempt=attempt, point_index=0, verdict="missed", note="A's objection"
    )

    loop = Loop.objects.create(slug="access-loop", title="Access loop")
    # Arithmetic first: A's answers to it are graded as they come, so finishing the mock
    # needs no rubric grading (the sentence model is not what this test is about).
    LoopItem.objects.create(loop=loop, question=arithmetic, order=0, minutes=10)
    LoopItem.objects.create(loop=loop, question=scenario, order=1, minutes=10)
    mock = mock_services.mock_start(user=a, loop=loop)
    invite = mock_services.invite_create(mock=mock, user=a)
    mock_services.invite_accept(token=invite.token, user=i)

    objects = {
        "topic": Topic.objects.get(slug="inference-basics"),
        "scenario": scenario,
        "attempt": attempt,
        "steps_attempt": steps_attempt,
        "step": step,
        "run": run,
        "loop": loop,
        "mock": mock,
        "invite": invite,
        ("auth", "group"): Group.objects.get(name="Authors"),
        ("auth", "user"): a,
        ("questions", "topic"): Topic.objects.get(slug="inference-basics"),
        ("questions", "question"): scenario,
        ("questions", "problem"): arithmetic.problem,
        ("questions", "step"): step,
        ("questions", "loop"): loop,
        ("trainer", "verdictobjection"): objection,
    }
    users_by_role = {"anon": None, "A": a, "B": b, "I": i, "author": author, "staff": staff}
    return objects, users_by_role


def url_kwargs(key: str, route: str, o: dict) -> dict:
    if key in {"attempt", "draft", "submit", "regrade", "self_assess", "checks", "objection"}:
        return {"attempt_id": o["attempt"].pk}
    if key in {"follow_up_draft", "follow_up_submit"}:
        return {"attempt_id": o["attempt"].pk, "index": 0}
    if key == "try_rubric":
        return {"question_id": o["scenario"].pk}
    if key in {"step_submit", "step_hint"}:
        return {"attempt_id": o["steps_attempt"].pk, "step_name": o["step"].name}
    if key in {"practice", "practice_new"}:
        return {"slug": o["scenario"].slug}
    if key == "questions:topic":
        return {"slug": o["topic"].slug}
    if key in {"lab_run", "lab_run_events", "lab_run_cancel", "lab_run_points_csv"}:
        return {"run_id": o["run"].pk}
    if key == "lab_form":
        return {"slug": "kv-cache-growth"}
    if key in {"mock_loop", "mock_start"}:
        return {"slug": o["loop"].slug}
    if key == "password_reset_confirm":  # A's id with a token that is not A's
        return {"uidb64": "MQ", "token": "c0ffee-0123456789abcdef0123456789abcdef"}
    if key == "mock_join":
        return {"token": o["invite"].token}
    if key == "mock_follow_up":
        return {"mock_id": o["mock"].pk, "order": 0, "index": 0}
    if "<int:order>" in route:
        return {"mock_id": o["mock"].pk, "order": 0}
    if "<int:mock_id>" in route:
        return {"mock_id": o["mock"].pk}
    if key == "admin:view_on_site":
        ct = ContentType.objects.get_for_model(Question)
        return {"content_type_id": ct.pk, "object_id": o["scenario"].pk}
    if key == "admin:app_list":
        return {"app_label": "questions"}
    if key == "admin:auth_user_password_change":
        return {"id": o[("auth", "user")].pk}
    if "<path:object_id>" in route:
        app, model = route.split("/")[1:3]
        return {"object_id": o[(app, model)].pk}
    if "(?P<url>" in route:  # the admin's catch-all
        return {}
    assert "<" not in route, f"no kwargs known for {key} ({route})"
    return {}


def build_url(key: str, route: str, name: str, o: dict) -> str:
    kwargs = url_kwargs(key, route, o)
    if name:
        return reverse(name, kwargs=kwargs)
    if "(?P<url>" in route:
        return "/admin/no-such-page/"
    return "/" + re.sub(r"<path:object_id>", str(kwargs["object_id"]), route)


def outcome(response) -> str:
    if response.status_code in (301, 302):
        location = response["Location"]
        if location.startswith("/accounts/login/"):
            return "login"
        if location.startswith("/admin/login/"):
            return "admin"
        return "302"
    return str(response.status_code)


def snapshot(o: dict, a) -> dict:
    """Every row of A's data that a visitor could change through these URLs."""
    tables = {
        "attempts": Attempt.objects.filter(user=a),
        "step answers": StepAnswer.objects.filter(attempt__user=a),
        "review cards": ReviewCard.objects.filter(user=a),
        "point checks": PointCheck.objects.filter(attempt__user=a),
        "follow-up answers": FollowUpResponse.objects.filter(attempt__user=a),
        "objections": VerdictObjection.objects.filter(attempt__user=a),
        "lab runs": LabRun.objects.filter(owner=a),
        "lab points": LabPoint.objects.filter(run__owner=a),
        "mocks": MockInterview.objects.filter(user=a),
        "mock items": MockItem.objects.filter(mock__user=a),
        "follow-ups": FollowUpAnswer.objects.filter(item__mock__user=a),
        "invites": MockInvite.objects.filter(mock__user=a),
    }
    return {
        name: sorted((repr(model_to_dict(row)) for row in qs), key=str)
        for name, qs in tables.items()
    }


def test_every_url_pattern_has_a_row():
    keys = {key for key, _route, _name in walk(get_resolver())}
    covered = {key for key, _method in EXPECTED}
    assert keys - covered == set(), "URL patterns without a row in MATRIX: add them"
    assert covered - keys == set(), "rows for URL patterns that no longer exist"
    for (key, method), row in EXPECTED.items():
        if method == "GET" and "405" in row.values():  # POST-only: its POST must be a row
            assert (key, "POST") in EXPECTED, f"{key} answers GET with 405 but has no POST row"


def test_the_table_keeps_learners_apart():
    """The rules, checked on the table itself: on a URL naming one of A's objects, B and the
    author never get a success or a redirect; the interviewer only on the pages of the mock
    they were invited to. (The invite link itself is the one way in: mock_join.)"""
    patterns = {key: route for key, route, _name in walk(get_resolver())}
    refused = {"403", "404", "405"}
    checked = 0
    for (key, method), row in EXPECTED.items():
        if key == "mock_join" or not any(f":{kw}>" in patterns[key] for kw in A_OBJECT_KWARGS):
            continue
        checked += 1
        assert row["B"] in refused and row["author"] in refused, (key, method, row)
        if key not in INTERVIEWER_PAGES:
            assert row["I"] in refused, (key, method, row)
    assert checked >= 30  # the filter above found the object rows


@pytest.mark.django_db
def test_access_matrix(world):
    objects, users = world
    a = users["A"]
    patterns = {key: (route, name) for key, route, name in walk(get_resolver())}
    clients = {role: Client() for role in ROLES}

    def visit(role: str) -> list[str]:
        wrong = []
        for (key, method), expected in EXPECTED.items():
            route, name = patterns[key]
            url = build_url(key, route, name, objects)
            client = clients[role]
            if users[role] is not None:
                client.force_login(users[role])  # again: a logout row signs the client out
            if method == "GET":
                response = client.get(url)
            else:
                response = client.post(url, POST_DATA.get(key, {}))
            # An SSE stream (streaming=True) is not read: its status is all this test needs
            # (and closing it here would close the test's database connection).
            got = outcome(response)
            if got != expected[role]:
                wrong.append(f"{role:6} {method:4} {url}  expected {expected[role]}, got {got}")
        return wrong

    before = snapshot(objects, a)
    wrong = []
    for role in ("anon", "B", "author"):
        caches["ratelimit"].clear()  # every visitor posts to the login forms: limits apart
        wrong += visit(role)
        assert snapshot(objects, a) == before, f"{role} changed learner A's data"
    for role in ("I", "staff", "A"):  # they may change A's data: the interviewer marks,
        caches["ratelimit"].clear()  # staff cancels A's run, A writes its own answers
        wrong += visit(role)
    assert wrong == [], "\n".join(wrong)


@pytest.mark.django_db
def test_the_interviewer_seat_needs_a_valid_unused_invite(client, world):
    objects, users = world
    mock = objects["mock"]
    client.force_login(users["B"])
    for token in ("not-a-token", objects["invite"].token[:-1] + "x", objects["invite"].token):
        assert client.get(reverse("mock_join", args=[token])).status_code == 403
        assert client.post(reverse("mock_join", args=[token])).status_code == 403
    assert client.get(reverse("mock_interviewer", args=[mock.pk])).status_code == 404
    mock.refresh_from_db()
    assert mock.interviewer_id == users["I"].pk


@pytest.mark.django_db
def test_cancel_never_redirects_to_another_site(client, world):
    objects, users = world
    client.force_login(users["A"])
    url = reverse("lab_run_cancel", args=[objects["run"].pk])
    for target in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)"):
        response = client.post(url, {"next": target})
        assert response.status_code == 302
        assert response["Location"] == reverse("lab_run", args=[objects["run"].pk])
    assert client.post(url, {"next": "/lab/runs/"})["Location"] == "/lab/runs/"
