"""Arithmetic practice pages: a variant, each step checked in place with htmx, a review."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from common import ratelimits
from questions.authoring import describe_unit, tolerance_text
from questions.expressions import UREG, format_quantity, parse_unit
from questions.markdown import render_markdown
from questions.models import Question
from questions.problems import render_text, solve
from trainer import scenario_views, services
from trainer.grading.arithmetic import AnswerError
from trainer.models import Attempt, StepAnswer
from trainer.selectors import own_attempt


@dataclass(frozen=True)
class StepView:
    number: int
    name: str
    prompt_html: str
    unit: str
    unit_label: str
    tolerance: str
    hints: list[str]
    hints_left: int
    answer: StepAnswer | None
    reference: str
    explanation_html: str
    your_value: str


def _step_views(context: services.AttemptContext) -> list[StepView]:
    scope = dict(context.variant.variables)
    finished = context.attempt.submitted is not None
    reference = solve(context.problem, scope)
    scope.update(reference)
    views = []
    for i, step in enumerate(context.problem.steps):
        shown = context.attempt.hints.get(step.name, 0)
        answer = context.answers.get(step.name)
        views.append(
            StepView(
                number=i + 1,
                name=step.name,
                prompt_html=render_markdown(render_text(step.prompt, scope)),
                unit=step.unit,
                unit_label=describe_unit(step.unit),
                tolerance=tolerance_text(step.rtol, step.atol, step.unit),
                hints=[render_text(h, scope) for h in step.hints[:shown]],
                hints_left=len(step.hints) - shown,
                answer=answer,
                reference=format_quantity(reference[step.name], step.unit) if finished else "",
                explanation_html=render_markdown(render_text(step.explanation, scope))
                if finished
                else "",
                your_value=format_quantity(UREG.Quantity(answer.value, parse_unit(step.unit)))
                if answer
                else "",
            )
        )
    return views


def _page_context(attempt: Attempt) -> dict:
    context = services.attempt_context(attempt)
    scope = dict(context.variant.variables)
    return {
        "attempt": attempt,
        "question": attempt.question,
        "prompt_html": render_markdown(render_text(attempt.question.prompt, scope)),
        "steps": _step_views(context),
        "hint_penalty": round(settings.ARITHMETIC_HINT_PENALTY * 100),
    }


@login_required
def practice_question(request: HttpRequest, slug: str) -> HttpResponse:
    question = get_object_or_404(Question.objects.published(), slug=slug)
    attempt = services.attempt_current(user=request.user, question=question)
    return redirect("attempt", attempt_id=attempt.pk)


@login_required
@require_POST
def practice_new_variant(request: HttpRequest, slug: str) -> HttpResponse:
    question = get_object_or_404(Question.objects.published(), slug=slug)
    attempt = services.attempt_start(user=request.user, question=question)
    return redirect("attempt", attempt_id=attempt.pk)


@login_required
def attempt_page(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    # A question withdrawn to draft after the attempt is shown to nobody but its authors (in
    # the admin); what the learner typed stays stored (and in export_learner_data).
    if not Question.objects.published().filter(pk=attempt.question_id).exists():
        raise Http404("This question is not published.")
    if attempt.question.kind != Question.Kind.ARITHMETIC:
        return scenario_views.scenario_page(request, attempt)
    return render(request, "trainer/arithmetic.html", _page_context(attempt))


def _step_response(request, attempt: Attempt, step_name: str, error: str = "", raw: str = ""):
    page = _page_context(attempt)
    step = next((s for s in page["steps"] if s.name == step_name), None)
    if step is None:
        raise Http404("No such step.")
    return render(
        request, "trainer/_step_response.html", {**page, "step": step, "error": error, "raw": raw}
    )


@login_required
@require_POST
def step_submit(request: HttpRequest, attempt_id: int, step_name: str) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    raw = request.POST.get("answer", "")
    limited = ratelimits.hit(request, "answer", ratelimits.user_id)
    if limited:  # the step comes back with what was typed still in its box
        message = ratelimits.answer_message(limited)
        response = _step_response(request, attempt, step_name, error=message, raw=raw)
        return ratelimits.with_retry_after(response, limited)
    try:
        services.step_answer_submit(attempt=attempt, step_name=step_name, raw=raw)
    except AnswerError as exc:
        return _step_response(request, attempt, step_name, error=str(exc), raw=raw)
    except KeyError:
        raise Http404("No such step.") from None
    attempt.refresh_from_db()
    return _step_response(request, attempt, step_name)


@login_required
@require_POST
def step_hint(request: HttpRequest, attempt_id: int, step_name: str) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    try:
        services.hint_reveal(attempt=attempt, step_name=step_name)
    except KeyError:
        raise Http404("No such step.") from None
    return _step_response(request, attempt, step_name, raw=request.POST.get("answer", ""))
