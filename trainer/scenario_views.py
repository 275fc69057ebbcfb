"""Scenario and design questions: autosaved answer, rubric feedback with evidence,
self-assessment, next review."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from common import ratelimits
from trainer import feedback, follow_up_views, judging, point_checks, services
from trainer.feedback import PointRow, RubricLine
from trainer.models import Attempt, ReviewCard
from trainer.selectors import own_attempt


def highlight(answer: str, rows: list[PointRow]) -> SafeString:
    """The answer, escaped, with each evidence sentence marked by the point it earned (or
    got wrong)."""
    html = escape(answer)
    for row in rows:
        if row.verdict not in ("hit", "contradicted"):
            continue
        for part in row.evidence_parts:
            sentence = escape(part)
            css = "evidence penalty" if row.penalty or row.verdict == "contradicted" else "evidence"
            marked = f'<mark class="{css}" data-point="{row.index + 1}">{sentence}</mark>'
            html = html.replace(sentence, marked, 1)
    return mark_safe(html.replace("\n", "<br>"))


def rubric_lines(question) -> list[RubricLine]:
    return [RubricLine(p.text, p.weight, p.penalty) for p in question.rubric.all()]


def point_rows(attempt: Attempt) -> list[PointRow]:
    return feedback.point_rows(
        attempt.result or {}, rubric_lines(attempt.question), attempt.self_points
    )


def scenario_context(attempt: Attempt) -> dict:
    rows = point_rows(attempt)
    card = ReviewCard.objects.filter(user=attempt.user, question=attempt.question).first()
    checks = point_checks.checks_round(attempt=attempt) if attempt.graded else None
    return {
        "attempt": attempt,
        "question": attempt.question,
        "rows": rows,
        "answer_html": highlight(attempt.answer, rows) if attempt.submitted else "",
        "disagreements": [r for r in rows if r.disagrees],
        "card": card,
        "result": attempt.result or {},
        "total": feedback.total(attempt.result or {}, attempt.score),
        "checks": checks,
        "checks_open": checks is not None and checks.open,
        "check_window_s": point_checks.CHECK_WINDOW_S,
        "follow_ups": follow_up_views.rows(attempt) if attempt.submitted else [],
        "objectable": True,
        "judge": judging.judge_state(attempt.result),
    }


def scenario_page(request: HttpRequest, attempt: Attempt) -> HttpResponse:
    return render(request, "trainer/scenario.html", scenario_context(attempt))


@login_required
@require_POST
def draft_autosave(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    if attempt.submitted is not None:
        return HttpResponse('<span class="saved">Already submitted.</span>')
    services.draft_save(attempt=attempt, text=request.POST.get("answer", ""))
    return render(request, "trainer/_autosave.html", {"attempt": attempt})


@login_required
@require_POST
def answer_submit(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    answer = request.POST.get("answer", "")
    limited = ratelimits.hit(request, "answer", ratelimits.user_id)
    if limited:  # keep the text as the draft, show the page with it and the reason
        services.draft_save(attempt=attempt, text=answer)
        context = scenario_context(attempt) | {"error": ratelimits.answer_message(limited)}
        response = render(request, "trainer/scenario.html", context)
        return ratelimits.with_retry_after(response, limited)
    if not answer.strip():
        services.draft_save(attempt=attempt, text=answer)
        context = scenario_context(attempt) | {"error": "Write an answer before submitting."}
        return render(request, "trainer/scenario.html", context, status=400)
    services.attempt_submit(attempt=attempt, answer=answer)
    return redirect("attempt", attempt_id=attempt.pk)


@login_required
@require_POST
def answer_regrade(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    if attempt.submitted is not None and attempt.graded is None:
        services.attempt_grade(attempt=attempt)
    return redirect("attempt", attempt_id=attempt.pk)


@login_required
@require_POST
def self_assess(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    # isdecimal, not isdigit: "²" is a digit int() refuses; 9 digits keep int() in its limit
    points = [int(p) for p in request.POST.getlist("point") if p.isdecimal() and len(p) < 10]
    services.self_assessment_save(attempt=attempt, points=points)
    if request.htmx:
        return render(request, "trainer/_self_assessment.html", scenario_context(attempt))
    return redirect("attempt", attempt_id=attempt.pk)
