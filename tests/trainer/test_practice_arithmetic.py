"""The arithmetic practice pages and services: stored attempts, htmx step checks, privacy."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from questions.expressions import parse_unit
from questions.models import Question
from trainer import services
from trainer.models import Attempt, StepAnswer

pytestmark = pytest.mark.django_db
SLUG = "kv-arith-sequences-that-fit"


@pytest.fixture
def bank():
    call_command("load_bank", verbosity=0)


def unit(step) -> str:
    return "" if step.unit in ("", "1", "dimensionless") else step.unit


def llama70_seed(question) -> int:
    """A seed whose variant is Llama-3-70B with a BF16 cache (320 KiB per token)."""
    from questions import problems
    from questions.services import problem_spec

    spec = problem_spec(question.problem)
    for seed in range(1000):
        choices = problems.draw_variant(spec, seed).choices
        if choices["model"] == "llama-3-70b" and choices["kvdtype"] == "bf16":
            return seed
    raise AssertionError("no Llama-3-70B BF16 variant")


@pytest.fixture
def attempt(bank):
    user = get_user_model().objects.create_user("ada", password="kv-heads-not-heads")
    question = Question.objects.get(slug=SLUG)
    return services.attempt_start(user=user, question=question, seed=llama70_seed(question))


def test_the_same_seed_shows_the_same_numbers_after_reload(client, attempt):
    client.login(username="ada", password="kv-heads-not-heads")

    def page() -> str:  # the page less its per-response CSRF token
        html = client.get(f"/attempts/{attempt.pk}/").content.decode()
        return re.sub(r'(csrfmiddlewaretoken" value="|X-CSRFToken": ")[^"]+', "", html)

    first = page()
    assert first == page()
    assert "Llama-3-70B" in first


def test_a_step_is_checked_in_place_and_stored(client, attempt):
    client.login(username="ada", password="kv-heads-not-heads")
    response = client.post(
        f"/attempts/{attempt.pk}/steps/kv_kib_per_token/",
        {"answer": "0.3125 MiB"},
        headers={"HX-Request": "true"},
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<li class="step step-correct"')
    answer = StepAnswer.objects.get(attempt=attempt, step_name="kv_kib_per_token")
    assert (answer.raw, answer.value, answer.unit, answer.verdict, answer.credit) == (
        "0.3125 MiB",
        320.0,
        "KiB",
        "correct",
        1.0,
    )


def test_unreadable_input_costs_nothing(client, attempt):
    client.login(username="ada", password="kv-heads-not-heads")
    url = f"/attempts/{attempt.pk}/steps/kv_kib_per_token/"
    html = client.post(url, {"answer": "5 GB/s"}).content.decode()
    assert "This step asks for a memory size (KiB); 5 GB/s is a rate of data" in html
    assert 'value="5 GB/s"' in html  # what was typed is kept in the box
    assert not StepAnswer.objects.filter(attempt=attempt).exists()
    assert "step-correct" in client.post(url, {"answer": "327680 B"}).content.decode()


def test_a_graded_step_keeps_its_first_answer(client, attempt):
    client.login(username="ada", password="kv-heads-not-heads")
    url = f"/attempts/{attempt.pk}/steps/kv_kib_per_token/"
    client.post(url, {"answer": "160 KiB"})
    client.post(url, {"answer": "320 KiB"})
    answer = StepAnswer.objects.get(attempt=attempt, step_name="kv_kib_per_token")
    assert (answer.raw, answer.verdict) == ("160 KiB", "misconception")


def test_hints_cost_credit_and_stop_at_the_last(client, attempt, settings):
    settings.ARITHMETIC_HINT_PENALTY = 0.15
    client.login(username="ada", password="kv-heads-not-heads")
    hint_url = f"/attempts/{attempt.pk}/steps/kv_kib_per_token/hint/"
    for _ in range(10):
        client.post(hint_url)
    attempt.refresh_from_db()
    revealed = attempt.hints["kv_kib_per_token"]
    assert revealed == len(services.attempt_context(attempt).problem.steps[0].hints)
    client.post(f"/attempts/{attempt.pk}/steps/kv_kib_per_token/", {"answer": "320 KiB"})
    answer = StepAnswer.objects.get(attempt=attempt)
    assert answer.hints_used == revealed
    assert answer.credit == pytest.approx(1 - 0.15 * revealed)


def test_finishing_shows_the_score_and_the_worked_solution(client, attempt):
    client.login(username="ada", password="kv-heads-not-heads")
    context = services.attempt_context(attempt)
    from questions.problems import solve

    reference = solve(context.problem, context.variant.variables)
    last = None
    for step in context.problem.steps:
        last = client.post(
            f"/attempts/{attempt.pk}/steps/{step.name}/",
            {
                "answer": f"{reference[step.name].to(parse_unit(step.unit)).magnitude!r} {unit(step)}"
            },
        ).content.decode()
        assert StepAnswer.objects.filter(attempt=attempt, step_name=step.name).exists(), last
    attempt.refresh_from_db()
    assert attempt.score == 1.0 and attempt.submitted is not None
    assert 'id="attempt-summary" hx-swap-oob="true"' in last
    assert "Score: 100%" in last and "Worked solution for this variant" in last
    page = client.get(f"/attempts/{attempt.pk}/").content.decode()  # the review replays it
    assert "Worked solution for this variant" in page and "320 KiB" in page


def test_learners_cannot_see_or_answer_each_others_attempts(client, attempt):
    get_user_model().objects.create_user("eve", password="kv-heads-not-heads")
    client.login(username="eve", password="kv-heads-not-heads")
    assert client.get(f"/attempts/{attempt.pk}/").status_code == 404
    response = client.post(f"/attempts/{attempt.pk}/steps/kv_kib_per_token/", {"answer": "1"})
    assert response.status_code == 404
    assert not StepAnswer.objects.exists()


def test_practice_needs_a_login(client, bank):
    response = client.get(f"/practice/{SLUG}/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_practice_resumes_the_latest_attempt_and_new_numbers_start_another(client, attempt):
    client.login(username="ada", password="kv-heads-not-heads")
    assert client.get(f"/practice/{SLUG}/")["Location"] == f"/attempts/{attempt.pk}/"
    response = client.post(f"/practice/{SLUG}/new/")
    newest = Attempt.objects.latest("started")
    assert response["Location"] == f"/attempts/{newest.pk}/" and newest.pk != attempt.pk


def test_follow_through_and_hints_count_against_the_review_rating(client, attempt):
    from fsrs import Rating

    from questions.problems import solve
    from trainer.models import ReviewLog

    client.login(username="ada", password="kv-heads-not-heads")
    context = services.attempt_context(attempt)
    wrong_first = solve(context.problem, context.variant.variables)
    first = context.problem.steps[0]
    mine = solve(
        context.problem,
        context.variant.variables,
        overrides={first.name: wrong_first[first.name] * 1.37},
    )
    for step in context.problem.steps:
        value = mine[step.name].to(parse_unit(step.unit)).magnitude
        client.post(
            f"/attempts/{attempt.pk}/steps/{step.name}/", {"answer": f"{value!r} {unit(step)}"}
        )
    attempt.refresh_from_db()
    verdicts = attempt.result["verdicts"]
    assert verdicts[first.name] == "incorrect" and "follow_through" in verdicts.values()
    log = ReviewLog.objects.get(attempt=attempt)
    # Most steps earned full credit, but only by following through: not an easy recall.
    assert log.rating < Rating.Easy


# --- input the way people type it, through the grading service (issue 18) ----------------

TYPED_TOPIC = {
    "topic": {"slug": "typed-input", "title": "Typed input", "order": 99},
    "questions": [
        {
            "slug": "typed-input-fleet",
            "kind": "arithmetic",
            "title": "A fleet in four numbers",
            "status": "published",
            "prompt": "A fleet.",
            "problem": {
                "parameters": {
                    "weights": {"value": 4104, "unit": "GB"},
                    "per_gpu": {"value": 80, "unit": "GB"},
                    "price": {"value": 4.32, "unit": "USD/hour"},
                    "tps": {"value": 1000, "unit": "token/s"},
                    "fast": {"value": 7},
                    "slow": {"value": 2},
                    "useful": {"value": 52},
                },
                "steps": [
                    {
                        "name": "gpus",
                        "prompt": "How many GPUs hold the weights?",
                        "expression": "weights / per_gpu",
                        "unit": "",
                        "integer": "ceil",
                    },
                    {
                        "name": "usd_per_token",
                        "prompt": "Price per token?",
                        "expression": "price / tps",
                        "unit": "USD/Mtok",
                    },
                    {
                        "name": "speedup",
                        "prompt": "How many times faster?",
                        "expression": "fast / slow",
                        "unit": "",
                    },
                    {
                        "name": "utilisation",
                        "prompt": "Utilisation?",
                        "expression": "useful / 100",
                        "unit": "percent",
                    },
                ],
            },
        }
    ],
}


@pytest.fixture
def typed_question(tmp_path):
    import yaml

    path = tmp_path / "typed-input.yaml"
    path.write_text(yaml.safe_dump(TYPED_TOPIC, sort_keys=False), encoding="utf-8")
    call_command("load_bank", str(path), verbosity=0)
    return Question.objects.get(slug="typed-input-fleet")


def submit_all(question, answers: dict[str, str]) -> tuple[Attempt, dict[str, StepAnswer]]:
    user, _ = get_user_model().objects.get_or_create(username="typist")
    attempt = services.attempt_start(user=user, question=question, seed=1)
    graded = {
        name: services.step_answer_submit(attempt=attempt, step_name=name, raw=raw)
        for name, raw in answers.items()
    }
    attempt.refresh_from_db()
    return attempt, graded


def test_answers_typed_as_people_type_them_are_graded_right(typed_question):
    attempt, graded = submit_all(
        typed_question,
        {
            "gpus": "52 GPUs",
            "usd_per_token": "1.2 $/1M tokens",
            "speedup": "3.5x",
            "utilisation": "52",
        },
    )
    assert {n: (a.verdict, a.credit) for n, a in graded.items()} == dict.fromkeys(
        graded, ("correct", 1.0)
    )
    assert [a.value for a in graded.values()] == pytest.approx([52, 1.2, 3.5, 52])
    assert attempt.score == 1.0 and attempt.submitted is not None


def test_near_misses_in_typed_answers_get_their_own_feedback(typed_question):
    _, graded = submit_all(
        typed_question,
        {"gpus": "51.3 GPUs", "usd_per_token": "$1.2 per 1K tokens", "utilisation": "0.52"},
    )
    assert (graded["gpus"].verdict, graded["gpus"].credit) == ("slip", 0.0)
    assert "whole number (round up), so 51.3 becomes 52" in graded["gpus"].feedback
    assert graded["usd_per_token"].feedback.startswith("Off by a factor of 10^3")
    assert graded["utilisation"].verdict == "slip"
    assert "asks for a percentage" in graded["utilisation"].feedback


def test_the_page_says_how_to_round_beside_an_integer_step(client, typed_question):
    get_user_model().objects.create_user("ada", password="kv-heads-not-heads")
    client.login(username="ada", password="kv-heads-not-heads")
    page = client.get(client.get("/practice/typed-input-fleet/")["Location"]).content.decode()
    assert "in <strong>a whole number</strong> · round up · within 1%" in page
    assert "in <strong>a plain number</strong> · within 1%" in page  # the ratio step
    assert "in <strong>USD/Mtok</strong>" in page
