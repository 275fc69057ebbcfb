"""The peer-interviewer seat: a single-use, expiring invite that never admits the
candidate; only the bound interviewer sees the view and marks; marks reach the scorecard;
the SSE stream carries a snapshot and then each autosave."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from mock import services
from mock.models import MockInterview, MockInvite
from questions.models import Loop

pytestmark = pytest.mark.django_db
PASSWORD = "prefill-then-decode"
WARM_UP = "inference-warm-up"


@pytest.fixture
def mock(ada) -> MockInterview:
    return services.mock_start(user=ada, loop=Loop.objects.get(slug=WARM_UP))


def invite_url(client, mock) -> str:
    client.login(username="ada", password=PASSWORD)
    assert client.post(f"/mock/{mock.pk}/invite/").status_code == 302
    invite = MockInvite.objects.get(mock=mock)
    assert len(invite.token) >= 40  # secrets.token_urlsafe(32)
    assert f"/mock/join/{invite.token}/" in client.get(f"/mock/{mock.pk}/").content.decode()
    client.logout()
    return f"/mock/join/{invite.token}/"


def as_user(client, name):
    client.logout()
    client.login(username=name, password=PASSWORD)
    return client


def test_the_first_other_user_becomes_the_interviewer_and_nobody_else(client, mock, bob, cy):
    url = invite_url(client, mock)
    assert as_user(client, "ada").get(url).status_code == 403  # never the candidate
    assert client.post(url).status_code == 403
    # Opening the link (a GET: a link preview, a prefetch) shows the offer, takes nothing.
    offer = as_user(client, "bob").get(url)
    assert offer.status_code == 200 and "Take the interviewer seat" in offer.content.decode()
    assert as_user(client, "cy").get(url).status_code == 200  # still open to anyone
    mock.refresh_from_db()
    assert mock.interviewer_id is None and MockInvite.objects.get(mock=mock).used_by is None
    assert as_user(client, "bob").post(url)["Location"] == f"/mock/{mock.pk}/interviewer/"
    assert client.get(f"/mock/{mock.pk}/interviewer/").status_code == 200
    assert client.get(url).status_code == 302  # the interviewer may reopen their link
    assert client.post(url).status_code == 302
    refused = as_user(client, "cy").get(url)
    assert refused.status_code == 403 and "already been used" in refused.content.decode()
    assert client.post(url).status_code == 403
    assert client.get(f"/mock/{mock.pk}/interviewer/").status_code == 404
    mock.refresh_from_db()
    assert mock.interviewer.username == "bob"


def test_the_candidate_cannot_open_the_interviewer_view(client, mock, bob):
    url = invite_url(client, mock)
    as_user(client, "bob").post(url)
    candidate = as_user(client, "ada")
    assert candidate.get(f"/mock/{mock.pk}/interviewer/").status_code == 404
    assert candidate.get(f"/mock/{mock.pk}/interviewer/events").status_code == 404
    assert (
        candidate.post(f"/mock/{mock.pk}/interviewer/items/0/mark/", {"point": "0"}).status_code
        == 404
    )


def test_an_expired_invite_is_refused(client, mock, bob):
    url = invite_url(client, mock)
    MockInvite.objects.filter(mock=mock).update(expires=timezone.now() - timedelta(seconds=1))
    for method in ("get", "post"):
        response = getattr(as_user(client, "bob"), method)(url)
        assert response.status_code == 403 and "expired" in response.content.decode()
    assert as_user(client, "bob").get("/mock/join/not-a-token/").status_code == 403


def test_an_anonymous_opener_must_sign_in_first(client, mock):
    url = invite_url(client, mock)
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert MockInvite.objects.get(mock=mock).used_by is None


def test_the_interviewer_sees_rubric_and_model_answer_and_marks_reach_the_scorecard(
    client, mock, bob, fast_grader
):
    url = invite_url(client, mock)
    interviewer = as_user(client, "bob")
    interviewer.post(url)
    item = mock.items.get(order=0)
    page = interviewer.get(f"/mock/{mock.pk}/interviewer/").content.decode()
    assert item.question.model_answer_html[:40] in page
    assert item.question.rubric.first().text[:40] in page
    response = interviewer.post(
        f"/mock/{mock.pk}/interviewer/items/0/mark/",
        {"point": ["0", "1"], "notes": "Clear on prefill; no numbers for decode."},
    )
    assert "your score" in response.content.decode()
    item.refresh_from_db()
    assert item.interviewer_points == [0, 1] and item.interviewer_score > 0
    candidate = as_user(client, "ada")
    candidate.post(f"/mock/{mock.pk}/finish/")
    page = candidate.get(f"/mock/{mock.pk}/scorecard/").content.decode()
    assert 'id="overall-interviewer"' in page
    assert "Clear on prefill; no numbers for decode." in page
    assert "Interviewer" in page and 'class="interviewer-mark">✓' in page


def test_the_snapshot_carries_what_the_candidate_typed(mock, bob):
    from mock.interviewer_views import snapshot

    item = services.mock_current(mock=mock)
    services.draft_save(item=item, slot="main", text="Prefill builds the KV cache")
    state = snapshot(mock.pk)
    assert state["current"] == 0 and state["texts"][0]["main"] == "Prefill builds the KV cache"
    assert state["times"][0]["main"] > 0  # the page keeps the newest text per box by this


@pytest.mark.django_db(transaction=True)
def test_the_sse_stream_sends_the_snapshot_then_each_autosave(asgi_server, ada, bob, redis_url):
    import threading

    import httpx

    mock = services.mock_start(user=ada, loop=Loop.objects.get(slug=WARM_UP))
    invite = services.invite_create(mock=mock, user=ada)
    services.invite_accept(token=invite.token, user=bob)
    item = services.mock_current(mock=mock)
    services.draft_save(item=item, slot="main", text="first words")

    with httpx.Client(base_url=asgi_server, timeout=10) as http:
        login = http.get("/accounts/login/")
        token = login.cookies["csrftoken"]
        http.post(
            "/accounts/login/",
            data={"username": "bob", "password": PASSWORD, "csrfmiddlewaretoken": token},
        )
        events = []
        with http.stream("GET", f"/mock/{mock.pk}/interviewer/events") as stream:
            typed = threading.Timer(
                1.0,
                lambda: services.draft_save(item=item, slot="main", text="first words, then more"),
            )
            typed.start()
            kind = None
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line.removeprefix("data: "))))
                    if kind == "answer" and events[-1][1]["text"] == "first words, then more":
                        break
    answers = [
        d["text"] for k, d in events if k == "answer" and d["slot"] == "main" and d["item"] == 0
    ]
    assert answers[0] == "first words" and answers[-1] == "first words, then more"


def test_an_arithmetic_question_takes_the_interviewers_own_score(client, mock, bob):
    url = invite_url(client, mock)
    interviewer = as_user(client, "bob")
    interviewer.post(url)
    item = mock.items.get(question__kind="arithmetic")
    interviewer.post(
        f"/mock/{mock.pk}/interviewer/items/{item.order}/mark/",
        {"score_10": "7", "notes": "Right formula, slipped a unit."},
    )
    item.refresh_from_db()
    assert item.interviewer_score == pytest.approx(0.7)
