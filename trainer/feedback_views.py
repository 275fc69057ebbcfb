"""After a written answer is graded: answer (or skip) the round of point checks, and object
to a verdict."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from trainer import objections, point_checks
from trainer.scenario_views import scenario_context
from trainer.selectors import own_attempt

MAX_POSTED_CHECKS = 50


def _responses(request: HttpRequest) -> dict[int, str]:
    """check-<point index> fields -> posted text; a malformed name is refused."""
    out: dict[int, str] = {}
    for key in list(request.POST.keys())[: MAX_POSTED_CHECKS + 10]:
        if not key.startswith("check-"):
            continue
        index = key.removeprefix("check-")
        if not index.isdecimal() or len(index) > 6:
            raise point_checks.CheckRefused(f"{key!r} names no point.")
        out[int(index)] = request.POST.get(key, "")
    return out


@login_required
@require_POST
def checks_submit(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    try:
        if request.POST.get("skip"):
            point_checks.checks_skip(attempt=attempt)
        else:
            point_checks.checks_answer(
                attempt=attempt,
                responses=_responses(request),
                final=bool(request.POST.get("final")),
            )
    except point_checks.CheckRefused as exc:
        attempt.refresh_from_db()
        context = scenario_context(attempt) | {"check_error": str(exc)}
        return render(request, "trainer/scenario.html", context, status=exc.status)
    return redirect("attempt", attempt_id=attempt.pk)


@login_required
@require_POST
def objection(request: HttpRequest, attempt_id: int) -> HttpResponse:
    attempt = own_attempt(request, attempt_id)
    point = request.POST.get("point", "")
    follow_up = request.POST.get("follow_up", "")
    status, message = 200, "Thank you: the authors will review this verdict."
    if not point.isdecimal() or len(point) > 6 or (follow_up and not follow_up.isdecimal()):
        status, message = 400, "That is not a point of this answer."
    else:
        try:
            objections.objection_create(
                attempt=attempt,
                point_index=int(point),
                note=request.POST.get("note", ""),
                follow_up=int(follow_up) if follow_up else None,
            )
        except objections.ObjectionRefused as exc:
            status, message = 400, str(exc)
    if request.htmx:  # htmx swaps 2xx only: the reason shows in place either way
        return render(
            request, "trainer/_objection_done.html", {"message": message, "refused": status != 200}
        )
    if status != 200:
        return HttpResponse(message, status=status)
    return redirect("attempt", attempt_id=attempt.pk)
