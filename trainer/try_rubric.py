"""Staff: "try this rubric on sample answers" — paste answers, see each point's verdict.

An admin action on questions (registered from TrainerConfig.ready(), since the questions app
may not import the grader) leads here. The grading is `manage grade_answers`'s own function
(trainer/grading/rubric/batch.py), so what an author sees is what the command and the
learners get. Nothing is stored.
"""

from __future__ import annotations

import re

from django.contrib import admin, messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from questions.models import Question
from trainer.grading.rubric.batch import LineError, grade_record

SEPARATOR = re.compile(r"^\s*---+\s*$", re.MULTILINE)
MAX_ANSWERS = 20
MAX_CHARS = 20_000  # per answer, as the practice box


def split_answers(text: str) -> list[str]:
    """Answers separated by a line of three dashes; blank ones dropped."""
    return [a.strip() for a in SEPARATOR.split(text or "") if a.strip()]


@staff_member_required
def try_rubric(request: HttpRequest, question_id: int) -> HttpResponse:
    question = get_object_or_404(Question, pk=question_id, kind__in=["scenario", "design"])
    text, results, error = "", [], ""
    if request.method == "POST":
        text = request.POST.get("answers", "")
        answers = split_answers(text)
        if not answers:
            error = "Paste at least one answer (separate answers with a line of three dashes: ---)."
        elif len(answers) > MAX_ANSWERS:
            error = f"At most {MAX_ANSWERS} answers at a time (you gave {len(answers)})."
        elif any(len(a) > MAX_CHARS for a in answers):
            error = f"An answer is longer than {MAX_CHARS:,} characters."
        else:
            try:
                results = [
                    (a, grade_record({"question": question.slug, "answer": a})) for a in answers
                ]
            except LineError as exc:
                error = str(exc)
    return render(
        request,
        "admin/try_rubric.html",
        {
            **admin.site.each_context(request),
            "title": f"Try the rubric of “{question.title}”",
            "question": question,
            "points": list(question.rubric.all()),
            "answers_text": text,
            "results": results,
            "error": error,
        },
        status=400 if error else 200,
    )


@admin.action(description="Try this rubric on sample answers")
def try_rubric_action(modeladmin, request, queryset):
    written = queryset.filter(kind__in=["scenario", "design"])
    if written.count() != 1:
        messages.error(request, "Select exactly one scenario or design question to try its rubric.")
        return None
    return redirect(reverse("try_rubric", args=[written.get().pk]))


def register_action() -> None:
    """Add the action to the Question admin (questions' admin cannot import the grader)."""
    question_admin = admin.site._registry.get(Question)
    if question_admin is not None and try_rubric_action not in question_admin.actions:
        question_admin.actions = [*question_admin.actions, try_rubric_action]
