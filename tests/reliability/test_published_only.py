"""Unpublished content (issue 16, finding 5): a draft question is shown to learners nowhere.

A topic holds a published question and a draft one with distinctive titles and prompts; both
name the same lab, and a loop asks the draft first. The learner also holds a graded attempt
and a due review card on the draft (left from when it was published, or from the leak this
test guards). Every learner-facing page is fetched as that learner (following the practice
redirects, starting and finishing a mock): the draft's title and prompt appear in no
response, and the published question appears where it belongs. Authors still preview drafts
in the admin.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from fsrs import Card

from lab.labs import LABS
from lab.models import LabRun
from mock.models import MockInterview
from questions.models import Loop, LoopItem, Question, RubricPoint, Topic
from trainer.models import Attempt, ReviewCard

DRAFT_TITLE = "Okapi draft title never shown"
DRAFT_PROMPT = "Okapi draft prompt about speculative wombats"
PUBLISHED_TITLE = "Zebra published title"
PUBLISHED_PROMPT = "Zebra published prompt about prefill and decode"
LAB = next(iter(LABS))


@pytest.fixture
def content(db):
    topic = Topic.objects.create(slug="okapi-zebra", title="Okapi and zebra", order=1)
    questions = {}
    for name, status, title, prompt, order in [
        ("draft", Question.Status.DRAFT, DRAFT_TITLE, DRAFT_PROMPT, 0),
        ("published", Question.Status.PUBLISHED, PUBLISHED_TITLE, PUBLISHED_PROMPT, 1),
    ]:
        q = Question.objects.create(
            topic=topic,
            slug=f"okapi-zebra-{name}",
            kind=Question.Kind.SCENARIO,
            title=title,
            prompt=prompt,
            status=status,
            order=order,
            competencies=["latency"],
            related_labs=[LAB],
            follow_ups=[f"{name} follow-up"],
        )
        RubricPoint.objects.create(
            question=q, text="Names prefill and decode", concepts=["prefill"]
        )
        questions[name] = q
    loop = Loop.objects.create(slug="okapi-zebra-loop", title="Okapi zebra loop")
    LoopItem.objects.create(loop=loop, question=questions["draft"], order=0, minutes=5)
    LoopItem.objects.create(loop=loop, question=questions["published"], order=1, minutes=5)
    return {"topic": topic, "loop": loop, **questions}


@pytest.fixture
def learner(content):
    user = get_user_model().objects.create_user("okapi-learner", password="pw-okapi-zebra")
    now = timezone.now()
    # Work on the draft from before it was withdrawn (or from the mock leak).
    old = Attempt.objects.create(
        user=user,
        question=content["draft"],
        answer="old answer",
        submitted=now - timedelta(days=2),
        graded=now - timedelta(days=2),
        score=0.4,
    )
    ReviewCard.objects.create(
        user=user, question=content["draft"], card=Card().to_dict(), due=now - timedelta(days=1)
    )
    client = Client()
    client.force_login(user)
    return {"user": user, "client": client, "old_attempt": old}


def _text(response) -> str:
    return response.content.decode(errors="replace")


def _leaks(pages: dict[str, str]) -> list[str]:
    return [
        f"draft shown on {name}: {needle!r}"
        for name, body in pages.items()
        for needle in (DRAFT_TITLE, DRAFT_PROMPT)
        if needle in body
    ]


@pytest.mark.django_db
def test_learners_never_see_a_draft_question(content, learner, settings):
    client, user = learner["client"], learner["user"]
    run = LabRun.objects.create(
        owner=user,
        lab=LAB,
        params={p.name: p.default for p in LABS[LAB].params},
        status=LabRun.Status.DONE,
    )
    pages: dict[str, str] = {}
    problems: list[str] = []  # collected, so one run on old code shows every leak at once

    def get(name: str, url: str, status: int = 200, **kwargs) -> str:
        response = client.get(url, **kwargs)
        if response.status_code != status:
            problems.append(f"{name}: {url} answered {response.status_code}, not {status}")
        pages[name] = _text(response)
        return pages[name]

    def expect(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    get("home", reverse("home"))
    get("home search", reverse("home") + "?q=okapi")
    get("home search (htmx)", reverse("home") + "?q=zebra", headers={"HX-Request": "true"})
    topic = get("topic", reverse("questions:topic", args=["okapi-zebra"]))
    expect(PUBLISHED_TITLE in topic, "topic page: published question missing")
    # Every way into practice lands on the published question, never the draft.
    for mode in ("surprise", "topic", "due"):
        response = client.get(
            reverse("practice_start"), {"mode": mode, "topic": "okapi-zebra"}, follow=True
        )
        pages[f"practice_start {mode}"] = _text(response)
    expect(PUBLISHED_PROMPT in pages["practice_start topic"], "practice by topic: not published")
    get("practice published", reverse("practice", args=[content["published"].slug]), 302)
    get("practice draft", reverse("practice", args=[content["draft"].slug]), 404)
    get("old attempt on the draft", reverse("attempt", args=[learner["old_attempt"].pk]), 404)
    get("progress", reverse("progress"))
    catalog = get("lab catalog", reverse("lab_catalog"))
    card = catalog.split(f'id="lab-{LAB}"', 1)[1].split("</li>", 1)[0]
    expect("1 question use" in card, "lab catalog: the draft is counted for its lab")
    lab_form = get("lab form", reverse("lab_form", args=[LAB]))
    expect(PUBLISHED_TITLE in lab_form, "lab form: published question missing")
    lab_run = get("lab run", reverse("lab_run", args=[run.pk]))
    expect(PUBLISHED_TITLE in lab_run, "lab run: published question missing")
    get("my runs", reverse("lab_my_runs"))
    get("mock home", reverse("mock_home"))
    expect(">1</td>" in pages["mock home"], "mock home: the draft is counted as a round")
    loop = get("mock loop", reverse("mock_loop", args=["okapi-zebra-loop"]))
    expect(PUBLISHED_TITLE in loop, "mock loop: published question missing")

    # The mock asks only the published question (the draft was the loop's first).
    response = client.post(reverse("mock_start", args=["okapi-zebra-loop"]), follow=True)
    pages["mock start → run"] = _text(response)
    mock = MockInterview.objects.get(user=user)
    asked = [i.question_id for i in mock.items.all()]
    expect(asked == [content["published"].pk], f"mock_start asked questions {asked}")
    expect(
        mock.budget_s == 5 * 60 * float(settings.MOCK_TIME_SCALE),
        f"mock budget {mock.budget_s} s includes the draft's minutes",
    )
    expect(PUBLISHED_PROMPT in pages["mock start → run"], "mock run: not the published prompt")
    get("mock home (active)", reverse("mock_home"))
    get("mock loop (active)", reverse("mock_loop", args=["okapi-zebra-loop"]))
    response = client.post(reverse("mock_finish", args=[mock.pk]), follow=True)
    pages["mock finish → scorecard"] = _text(response)
    scorecard = get("scorecard", reverse("mock_scorecard", args=[mock.pk]))
    expect(PUBLISHED_TITLE in scorecard, "scorecard: published question missing")
    get("mock loop (history)", reverse("mock_loop", args=["okapi-zebra-loop"]))
    get("home (signed in, after the mock)", reverse("home"))
    get("progress (after the mock)", reverse("progress"))

    problems += _leaks(pages)
    assert not problems, "\n".join(problems)


@pytest.mark.django_db
def test_learner_counts_and_queues_leave_out_drafts(content, learner):
    """Counts and queues built from the draft are leaks too (a number with no page behind it)."""
    from trainer import progress
    from trainer.reviews import due_cards

    user = learner["user"]
    assert progress.due_count(user) == 0
    assert list(due_cards(user)) == []
    assert sum(d["due"] for d in progress.reviews_due_by_day(user)) == 0
    assert progress.score_history(user) == []
    assert progress.competency_scores(user) == []
    assert progress.topic_progress(user)[content["topic"].pk] == {
        "attempted": 0,
        "total": 1,
        "score": None,
    }


@pytest.mark.django_db
def test_authors_still_preview_drafts_in_the_admin(content, admin_client):
    draft = content["draft"]
    response = admin_client.get(reverse("admin:questions_question_change", args=[draft.pk]))
    assert response.status_code == 200
    assert DRAFT_TITLE in _text(response)
