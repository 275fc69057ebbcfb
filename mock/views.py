"""Candidate pages: loops, start, the timed question page, autosave, answers, scorecard."""

from __future__ import annotations

import contextlib

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from common import ratelimits
from mock import scorecard as cards
from mock import services
from mock.models import MockInterview, MockInvite, MockItem
from questions.models import Loop, LoopItem, published_q
from trainer import api as practice


def _own_mock(request: HttpRequest, mock_id: int) -> MockInterview:
    """The candidate's own mock; anyone else's is indistinguishable from missing."""
    return get_object_or_404(
        MockInterview.objects.select_related("loop"), pk=mock_id, user=request.user
    )


def _item(mock: MockInterview, order: int) -> MockItem:
    return get_object_or_404(
        MockItem.objects.select_related("question", "attempt", "mock"), mock=mock, order=order
    )


def _answer_limited(request: HttpRequest, item: MockItem, slot: str) -> HttpResponse | None:
    """The per-learner answer limit (shared with practice). A refused answer is saved as the
    box's draft first, and the 429 page shows it too: nothing typed is lost."""
    limited = ratelimits.hit(request, "answer", ratelimits.user_id)
    if not limited:
        return None
    steps = {k.removeprefix("step:"): v for k, v in request.POST.items() if k.startswith("step:")}
    text = request.POST.get("answer", "")
    # A question that closed meanwhile keeps no draft; the page below still shows the text.
    with contextlib.suppress(services.MockError, ValueError):
        services.draft_save(item=item, slot=slot, text=text, steps=steps)
    kept = "\n".join(f"{k}: {v}" for k, v in steps.items()) if slot == "steps" else text
    back = reverse("mock_run", args=[item.mock_id])
    return ratelimits.too_many(
        request, limited, ratelimits.answer_message(limited), kept=kept, back=back
    )


@login_required
def home(request: HttpRequest) -> HttpResponse:
    loops = []
    published_items = LoopItem.objects.filter(published_q("question__"))
    for loop in Loop.objects.prefetch_related(Prefetch("items", queryset=published_items)):
        items = list(loop.items.all())
        last = (
            MockInterview.objects.filter(user=request.user, loop=loop, finished__isnull=False)
            .order_by("-finished")
            .first()
        )
        loops.append(
            {
                "loop": loop,
                "rounds": len(items),
                "minutes": sum(i.minutes for i in items),
                "last": last,
            }
        )
    active = MockInterview.objects.filter(user=request.user, finished__isnull=True).select_related(
        "loop"
    )
    return render(request, "mock/home.html", {"loops": loops, "active": active})


@login_required
def loop_page(request: HttpRequest, slug: str) -> HttpResponse:
    loop = get_object_or_404(Loop, slug=slug)
    scale = float(settings.MOCK_TIME_SCALE)
    rounds = [
        {"item": li, "question": li.question, "budget_s": li.minutes * 60 * scale}
        for li in loop.items.filter(published_q("question__")).select_related("question__topic")
    ]
    history = cards.history(request.user, loop)
    chart = [
        {"when": h["when"].isoformat(), "overall": h["overall"], "competencies": h["competencies"]}
        for h in history
    ]
    return render(
        request,
        "mock/loop.html",
        {
            "loop": loop,
            "rounds": rounds,
            "minutes": sum(r["item"].minutes for r in rounds),
            "total_s": sum(r["budget_s"] for r in rounds),
            "scale": scale,
            "history": history,
            "chart": {"history": chart, "competencies": list(cards.SIX)},
            "active": MockInterview.objects.filter(
                user=request.user, loop=loop, finished__isnull=True
            ).first(),
        },
    )


@login_required
@require_POST
def start(request: HttpRequest, slug: str) -> HttpResponse:
    loop = get_object_or_404(Loop, slug=slug)
    try:
        mock = services.mock_start(user=request.user, loop=loop)
    except services.MockError as exc:
        messages.error(request, str(exc))
        return redirect("mock_loop", slug=slug)
    return redirect("mock_run", mock_id=mock.pk)


def _question_view(item: MockItem) -> dict:
    """The prompt (with the candidate's numbers for arithmetic) and the steps to answer;
    no references or hints before the scorecard."""
    if not practice.grader_for(item.question).stepwise:
        return {"stepwise": False, "prompt_html": item.question.prompt_html, "steps": []}
    context = practice.attempt_context(item.attempt)
    return {
        "stepwise": True,
        "prompt_html": practice.prompt_html(context),
        "steps": practice.step_views(context, reveal=False, drafts=item.step_drafts or {}),
    }


@login_required
def run_page(request: HttpRequest, mock_id: int) -> HttpResponse:
    mock = _own_mock(request, mock_id)
    item = services.mock_current(mock=mock)
    if item is None:
        return redirect("mock_scorecard", mock_id=mock.pk)
    mock.refresh_from_db()
    now = timezone.now()
    follow_ups = list(item.follow_up_answers.filter(submitted__isnull=False))
    invite = (
        MockInvite.objects.filter(mock=mock, used_by__isnull=True, expires__gt=now)
        .order_by("-created")
        .first()
    )
    context = {
        "mock": mock,
        "item": item,
        "question": item.question,
        "attempt": item.attempt,
        **_question_view(item),
        "answered_follow_ups": follow_ups,
        "follow_up": services.follow_up_current(item),
        "follow_up_total": len(item.question.follow_up_items()),
        "question_remaining_s": services.remaining_s(item.deadline, now),
        "loop_remaining_s": services.remaining_s(mock.deadline, now),
        "count": mock.items.count(),
        "is_last": item.order == mock.items.count() - 1,
        "invite_url": request.build_absolute_uri(reverse("mock_join", args=[invite.token]))
        if invite
        else "",
        "in_mock": True,  # base.html hides the Lab link until the scorecard
    }
    return render(request, "mock/run.html", context)


# The largest autosave body taken: an answer of ANSWER_MAX_CHARS characters URL-encoded at
# the worst (a 4-byte UTF-8 character is 12 bytes: %F0%9F%98%80) is 240,000 bytes, plus the
# CSRF token and the box name. A larger body is refused before any of its fields is used
# (Django's DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB, bounds what is parsed at all).
DRAFT_MAX_BODY_BYTES = 256 * 1024


def _refused(message: str, status: int) -> HttpResponse:
    # The message may quote the box or step name the client sent: escaped, never markup.
    return HttpResponse(format_html('<span class="unsaved">{}</span>', message), status=status)


def _autosave_limited(request: HttpRequest) -> HttpResponse | None:
    """More autosaves than anyone types (RATELIMITS["autosave"], 10 a second): a 429 with
    Retry-After; autosave.js keeps the text and sends it again after that."""
    limited = ratelimits.hit(request, "autosave", ratelimits.user_id)
    if not limited:
        return None
    message = (
        f"Not saved: more than {limited.limit} autosaves in {limited.per} from your account. "
        f"Your text is still in the box and is saved again in {limited.wait}."
    )
    return ratelimits.with_retry_after(_refused(message, 429), limited)


@login_required
@require_POST
def draft(request: HttpRequest, mock_id: int, order: int) -> HttpResponse:
    item = _item(_own_mock(request, mock_id), order)
    try:
        size = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        size = 0
    if size > DRAFT_MAX_BODY_BYTES:
        limit = practice.ANSWER_MAX_CHARS
        return _refused(
            f"Not saved: this autosave is {size:,} bytes; one may be at most "
            f"{DRAFT_MAX_BODY_BYTES:,} bytes (an answer of {limit:,} characters fits).",
            413,
        )
    if limited := _autosave_limited(request):
        return limited
    slot = request.POST.get("slot", "main")
    steps = {k.removeprefix("step:"): v for k, v in request.POST.items() if k.startswith("step:")}
    try:
        services.draft_save(item=item, slot=slot, text=request.POST.get("answer", ""), steps=steps)
    except services.DraftRejected as exc:
        return _refused(str(exc), exc.status)
    except (services.MockError, ValueError) as exc:
        return _refused(str(exc), 400)
    when = timezone.localtime().strftime("%H:%M:%S")
    return HttpResponse(f'<span class="saved">Saved {when}</span>')


@login_required
@require_POST
def answer(request: HttpRequest, mock_id: int, order: int) -> HttpResponse:
    item = _item(_own_mock(request, mock_id), order)
    if limited := _answer_limited(request, item, "main"):
        return limited
    try:
        services.answer_submit(item=item, text=request.POST.get("answer", ""))
    except services.MockError as exc:
        messages.error(request, str(exc))
    return redirect("mock_run", mock_id=mock_id)


@login_required
@require_POST
def steps(request: HttpRequest, mock_id: int, order: int) -> HttpResponse:
    item = _item(_own_mock(request, mock_id), order)
    if limited := _answer_limited(request, item, "steps"):
        return limited
    raws = {k.removeprefix("step:"): v for k, v in request.POST.items() if k.startswith("step:")}
    try:
        errors = services.steps_submit(item=item, raws=raws)
    except services.MockError as exc:
        messages.error(request, str(exc))
        return redirect("mock_run", mock_id=mock_id)
    for name, error in errors.items():
        messages.error(request, f"{name}: {error}")
    return redirect("mock_run", mock_id=mock_id)


@login_required
@require_POST
def follow_up(request: HttpRequest, mock_id: int, order: int, index: int) -> HttpResponse:
    item = _item(_own_mock(request, mock_id), order)
    if limited := _answer_limited(request, item, f"fu-{index}"):
        return limited
    try:
        services.follow_up_submit(item=item, index=index, text=request.POST.get("answer", ""))
    except services.MockError as exc:
        messages.error(request, str(exc))
    return redirect("mock_run", mock_id=mock_id)


@login_required
@require_POST
def next_question(request: HttpRequest, mock_id: int, order: int) -> HttpResponse:
    item = _item(_own_mock(request, mock_id), order)
    drafts = {
        k: v
        for k, v in request.POST.items()
        if k == "main" or k.startswith("fu-") or k.startswith("step:")
    }
    try:
        services.item_next(item=item, drafts=drafts)
    except services.MockError as exc:
        messages.error(request, str(exc))
    return redirect("mock_run", mock_id=mock_id)


@login_required
@require_POST
def finish(request: HttpRequest, mock_id: int) -> HttpResponse:
    mock = _own_mock(request, mock_id)
    services.mock_finish(mock=mock)
    return redirect("mock_scorecard", mock_id=mock.pk)


@login_required
def scorecard_page(request: HttpRequest, mock_id: int) -> HttpResponse:
    """The candidate's scorecard; the mock's interviewer may read it too."""
    mock = get_object_or_404(
        MockInterview.objects.select_related("loop", "interviewer"), pk=mock_id
    )
    if request.user.pk not in (mock.user_id, mock.interviewer_id):
        raise Http404("No such mock")
    if mock.finished is None:
        if request.user.pk != mock.user_id:
            return redirect("mock_interviewer", mock_id=mock.pk)
        return redirect("mock_run", mock_id=mock.pk)
    if request.method == "POST" and request.user.pk == mock.user_id:
        services.mock_grade(mock=mock)  # "grade again" after a grader failure
        return redirect("mock_scorecard", mock_id=mock.pk)
    card = cards.scorecard(mock)
    return render(request, "mock/scorecard.html", {"mock": mock, "card": card})


@login_required
@require_POST
def invite(request: HttpRequest, mock_id: int) -> HttpResponse:
    mock = _own_mock(request, mock_id)
    try:
        services.invite_create(mock=mock, user=request.user)
    except services.MockError as exc:
        messages.error(request, str(exc))
    return redirect("mock_run", mock_id=mock.pk)
