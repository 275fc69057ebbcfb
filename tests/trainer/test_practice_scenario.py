"""Scenario practice: autosave, stored-then-graded answers, self-assessment, reviews,
starters, progress, privacy."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from questions.models import Question, Topic, published_q
from trainer import services
from trainer.grading import rubric
from trainer.models import Attempt, ReviewCard, ReviewLog

pytestmark = pytest.mark.django_db
SLUG = "kv-arith-llama3-70b-node"
PASSWORD = "prefill-then-decode"


@pytest.fixture
def bank():
    call_command("load_bank", verbosity=0)


@pytest.fixture
def ada(client, bank):
    user = get_user_model().objects.create_user("ada", password=PASSWORD)
    client.login(username="ada", password=PASSWORD)
    return user


def start(client) -> Attempt:
    response = client.get(f"/practice/{SLUG}/")
    assert response.status_code == 302
    return Attempt.objects.get(pk=int(response["Location"].strip("/").split("/")[-1]))


def test_the_draft_is_saved_as_typed_and_restored_on_reload(client, ada):
    attempt = start(client)
    response = client.post(f"/attempts/{attempt.pk}/draft/", {"answer": "Per token: 2 x 80 x 8"})
    assert "Draft saved" in response.content.decode()
    page = client.get(f"/practice/{SLUG}/").url  # the same unfinished attempt resumes
    assert page == f"/attempts/{attempt.pk}/"
    assert "Per token: 2 x 80 x 8</textarea>" in client.get(page).content.decode()


def test_an_empty_answer_is_refused_with_a_message(client, ada):
    attempt = start(client)
    response = client.post(f"/attempts/{attempt.pk}/submit/", {"answer": "   "})
    assert response.status_code == 400
    assert "Write an answer before submitting." in response.content.decode()
    attempt.refresh_from_db()
    assert attempt.submitted is None


def test_a_submitted_answer_is_graded_with_evidence_and_scheduled(client, ada):
    attempt = start(client)
    answer = Question.objects.get(slug=SLUG).model_answer
    response = client.post(f"/attempts/{attempt.pk}/submit/", {"answer": answer})
    assert response.status_code == 302
    attempt.refresh_from_db()
    assert attempt.answer == answer and attempt.score >= 0.6 and attempt.graded
    client.post(f"/attempts/{attempt.pk}/checks/", {"skip": "1"})  # past any quick checks
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert '<mark class="evidence" data-point="1">' in page
    assert "Next review:" in page and "Model answer" in page
    card = ReviewCard.objects.get(user=ada, question__slug=SLUG)
    assert card.due > timezone.now() and card.reviews == 1
    assert ReviewLog.objects.get(card=card).rating >= 3


def test_a_grader_failure_keeps_the_answer_and_says_so(client, ada, monkeypatch):
    attempt = start(client)

    def broken(*args, **kwargs):  # fault injection: the grader raises
        raise RuntimeError("model file unreadable")

    monkeypatch.setattr(rubric, "grade", broken)
    client.post(
        f"/attempts/{attempt.pk}/submit/", {"answer": "KV is 2 x layers x kv heads x dim x bytes."}
    )
    attempt.refresh_from_db()
    assert (
        attempt.answer.startswith("KV is 2 x layers") and attempt.submitted and not attempt.graded
    )
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    assert "The automatic grader failed (RuntimeError: model file unreadable)" in page
    assert "Your answer is saved" in page
    monkeypatch.undo()
    client.post(f"/attempts/{attempt.pk}/grade/")
    attempt.refresh_from_db()
    assert attempt.graded and attempt.grader_error == ""


def test_self_assessment_keeps_both_scores_and_shows_disagreements(client, ada):
    attempt = start(client)
    client.post(
        f"/attempts/{attempt.pk}/submit/",
        {
            "answer": "Per token it is 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 bytes, "
            "because Llama-3-70B uses GQA with 8 KV heads."
        },
    )
    attempt.refresh_from_db()
    graded_hits = {p["index"] for p in attempt.result["points"] if p["hit"]}
    claimed = sorted(graded_hits | {4})
    html = client.post(
        f"/attempts/{attempt.pk}/self/",
        {"point": [str(i) for i in claimed]},
        headers={"HX-Request": "true"},
    ).content.decode()
    attempt.refresh_from_db()
    assert attempt.self_points == claimed and attempt.self_score > attempt.score
    why = {"contradicted": "found it stated wrongly", "unclear": "could not verify it"}
    verdict = attempt.result["points"][4].get("verdict", "missed")
    said = why.get(verdict, "found no sentence for it")
    assert f"Point 5: you say covered, the grader {said}" in html


def test_learners_cannot_read_or_write_each_others_answers(client, ada):
    attempt = start(client)
    client.post(f"/attempts/{attempt.pk}/draft/", {"answer": "mine"})
    get_user_model().objects.create_user("eve", password=PASSWORD)
    client.login(username="eve", password=PASSWORD)
    assert client.get(f"/attempts/{attempt.pk}/").status_code == 404
    for action in ("draft", "submit", "self", "grade"):
        assert client.post(f"/attempts/{attempt.pk}/{action}/", {"answer": "x"}).status_code == 404
    attempt.refresh_from_db()
    assert attempt.draft == "mine" and attempt.submitted is None


def test_practice_by_topic_due_and_surprise(client, ada):
    topic = Topic.objects.get(slug="kv-cache-arithmetic")
    url = client.get(f"/practice/?mode=topic&topic={topic.slug}").url
    assert Question.objects.get(slug=url.strip("/").split("/")[-1]).topic == topic
    response = client.get("/practice/?mode=due", follow=True)
    assert "Nothing is due for review" in response.content.decode()
    question = Question.objects.get(slug=SLUG)
    ReviewCard.objects.create(user=ada, question=question, card={}, due=timezone.now())
    url = client.get("/practice/?mode=due").url
    review = Attempt.objects.get(user=ada, question=question)
    assert url == f"/attempts/{review.pk}/"
    assert client.get("/practice/?mode=surprise").url.startswith("/practice/")
    assert client.get("/practice/?mode=topic&topic=nope").status_code == 404


def test_progress_page_and_home_show_the_learner_their_numbers(client, ada):
    attempt = start(client)
    services.attempt_submit(attempt=attempt, answer=Question.objects.get(slug=SLUG).model_answer)
    attempt.refresh_from_db()
    page = client.get("/progress/").content.decode()
    assert 'id="progress-data"' in page and "KV-cache arithmetic" in page
    assert f"{round(attempt.score * 100)}%" in page
    home = client.get("/").content.decode()
    in_topic = Question.objects.filter(published_q(), topic=attempt.question.topic).count()
    assert in_topic >= 3  # the bank's floor per topic
    assert f"1/{in_topic} tried" in home and "Reviews due (0)" in home


def test_ratings_come_from_scores_and_help():
    from fsrs import Rating

    from trainer.reviews import rating_for

    assert rating_for(Attempt(score=0.2)) == Rating.Again
    assert rating_for(Attempt(score=0.5)) == Rating.Hard
    assert rating_for(Attempt(score=0.8)) == Rating.Good
    assert rating_for(Attempt(score=0.95)) == Rating.Easy


def test_a_review_is_a_fresh_attempt_with_the_model_answer_hidden(client, ada):
    question = Question.objects.get(slug=SLUG)
    old = start(client)
    services.attempt_submit(attempt=old, answer=question.model_answer)
    ReviewCard.objects.filter(user=ada, question=question).update(due=timezone.now())
    response = client.get("/practice/?mode=due", follow=True)
    html = response.content.decode()
    review = Attempt.objects.filter(user=ada, question=question).latest("started")
    assert review.pk != old.pk and review.submitted is None
    assert response.redirect_chain[-1][0] == f"/attempts/{review.pk}/"
    assert "Model answer" not in html and 'name="answer"' in html
    # A review left half-typed resumes with its draft; it does not start yet another one.
    client.post(f"/attempts/{review.pk}/draft/", {"answer": "from memory: 2 x layers"})
    assert client.get("/practice/?mode=due").url == f"/attempts/{review.pk}/"
    assert "from memory: 2 x layers" in client.get(f"/attempts/{review.pk}/").content.decode()


def test_self_assessment_starts_unticked_whatever_the_grader_said(client, ada):
    attempt = start(client)
    services.attempt_submit(attempt=attempt, answer=Question.objects.get(slug=SLUG).model_answer)
    attempt.refresh_from_db()
    assert any(p["hit"] for p in attempt.result["points"])  # the grader credited points
    client.post(f"/attempts/{attempt.pk}/checks/", {"skip": "1"})
    html = client.get(f"/attempts/{attempt.pk}/").content.decode()
    section = html[html.index('id="self-assessment"') :]
    section = section[: section.index("</section>")]
    assert 'name="point"' in section and "checked" not in section
    # After the learner saves, their own ticks are shown back.
    html = client.post(f"/attempts/{attempt.pk}/self/", {"point": ["0"]}).content.decode()
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()
    section = page[page.index('id="self-assessment"') :]
    assert section[: section.index("</section>")].count("checked") == 1
