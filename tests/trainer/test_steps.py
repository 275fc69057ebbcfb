"""trainer.steps: the one renderer of an arithmetic attempt's prompt and steps (practice
page, mock question page, interviewer seat)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from questions.models import Question
from trainer import services, steps

pytestmark = pytest.mark.django_db
SLUG = "kv-arith-sequences-that-fit"


@pytest.fixture
def context():
    call_command("load_bank", verbosity=0)
    user = get_user_model().objects.create_user("ada", password="kv-heads-not-heads")
    attempt = services.attempt_start(user=user, question=Question.objects.get(slug=SLUG), seed=3)
    return services.attempt_context(attempt)


def test_prompts_carry_the_variants_numbers(context):
    html = steps.prompt_html(context)
    assert "{" not in html and html.startswith("<")
    views = steps.step_views(context)
    assert [v.number for v in views] == list(range(1, len(context.problem.steps) + 1))
    assert [v.name for v in views] == [s.name for s in context.problem.steps]
    assert all("{" not in v.prompt_html and v.unit_label and v.tolerance for v in views)


def test_references_are_shown_once_finished_or_when_asked(context):
    assert all(v.reference == "" == v.explanation_html for v in steps.step_views(context))
    revealed = steps.step_views(context, reveal=True)
    assert all(v.reference for v in revealed)
    first = context.problem.steps[0]
    services.step_answer_submit(attempt=context.attempt, step_name=first.name, raw="1")
    context = services.attempt_context(context.attempt)
    (view, *_rest) = steps.step_views(context, reveal=False)
    assert view.answer.raw == "1" and view.your_value and view.reference == ""


def test_hints_and_drafts(context):
    name = context.problem.steps[0].name
    services.hint_reveal(attempt=context.attempt, step_name=name)
    context = services.attempt_context(context.attempt)
    first, *rest = steps.step_views(context, drafts={name: "320 KiB"})
    assert len(first.hints) == 1 and first.hints_left == len(context.problem.steps[0].hints) - 1
    assert first.draft == "320 KiB" and all(v.draft == "" for v in rest)
