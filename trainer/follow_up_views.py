"""Practice follow-ups: an optional answer box per follow-up that has a rubric, shown after
the main answer; autosaved like the main answer, graded with the same grader, and shown
with the same feedback."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from common import ratelimits
from trainer import feedback, follow_ups
from trainer.models import Attempt
from trainer.selectors import own_attempt


def rows(attempt: Attempt) -> list[dict]:
    """Each follow-up with its response and, once graded, its feedback rows and total."""
    out = []
    for row in follow_ups.follow_up_rows(attempt):
        response = row["response"]
        graded = response is not None and response.submitted is not None
        lines = [
            feedback.RubricLine(
                p.get("text", ""), float(p.get("weight", 1)), bool(p.get("penalty"))
            )
            for p in row["rubric"]
        ]
        out.append(
            row
            | {
                "graded": graded,
                "points": feedback.point_rows(response.result, lines) if graded else [],
                "total": feedback.total(response.result, response.score) if graded else None,
            }
        )
    return out


@login_required
@require_POST
def follow_up_draft(request: HttpRequest, attempt_id: int, index: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    try:
        row = follow_ups.follow_up_draft_save(
            attempt=attempt, index=index, text=request.POST.get("answer", "")
        )
    except follow_ups.FollowUpError as exc:
        raise Http404(str(exc)) from None
    if row.submitted is not None:
        return HttpResponse('<span class="saved">Already submitted.</span>')
    return render(request, "trainer/_autosave.html", {"attempt": row})


@login_required
@require_POST
def follow_up_submit(request: HttpRequest, attempt_id: int, index: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    text = request.POST.get("answer", "")
    url = reverse("attempt", kwargs={"attempt_id": attempt.pk}) + f"#follow-up-{index + 1}"
    limited = ratelimits.hit(request, "answer", ratelimits.user_id)
    try:
        if limited:  # keep the text as the draft; the page says why
            follow_ups.follow_up_draft_save(attempt=attempt, index=index, text=text)
            return ratelimits.with_retry_after(
                HttpResponse(ratelimits.answer_message(limited), status=429), limited
            )
        if not text.strip():
            follow_ups.follow_up_draft_save(attempt=attempt, index=index, text=text)
            return redirect(url)
        follow_ups.follow_up_submit(attempt=attempt, index=index, text=text)
    except follow_ups.FollowUpError as exc:
        raise Http404(str(exc)) from None
    return redirect(url)
