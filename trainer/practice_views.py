"""Arithmetic practice pages: a variant, each step checked in place with htmx, a review."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from common import ratelimits
from questions.models import Question
from trainer import scenario_views, services, steps
from trainer.grading.arithmetic import AnswerError
from trainer.grading.registry import grader_for
from trainer.models import Attempt
from trainer.selectors import own_attempt


def _page_context(attempt: Attempt) -> dict:
    context = services.attempt_context(attempt)
    return {
        "attempt": attempt,
        "question": attempt.question,
        "prompt_html": steps.prompt_html(context),
        "steps": steps.step_views(context),
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
    if not grader_for(attempt.question).stepwise:
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
