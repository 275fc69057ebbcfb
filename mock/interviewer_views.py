"""The peer-interviewer seat: claim an invite, watch the answer being typed (SSE), mark."""

from __future__ import annotations

import asyncio
import math

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from common import sse
from mock import live, services
from mock.models import MockInterview, MockItem
from trainer import api as practice

RESYNC_EVERY = 5  # quiet reads between DB reads anyway (~10 s): converges without Redis
REREAD_MARGIN_MS = 250


@login_required
@require_http_methods(["GET", "POST"])
def join(request: HttpRequest, token: str) -> HttpResponse:
    """GET shows whose mock the link is for and a button; only the POST takes the seat (a
    link preview or a browser's prefetch must not)."""
    try:
        if request.method == "POST":
            mock = services.invite_accept(token=token, user=request.user)
            return redirect("mock_interviewer", mock_id=mock.pk)
        mock, yours = services.invite_check(token=token, user=request.user)
    except services.MockError as exc:
        return render(request, "mock/refused.html", {"reason": str(exc)}, status=403)
    if yours:
        return redirect("mock_interviewer", mock_id=mock.pk)
    return render(request, "mock/join.html", {"mock": mock})


def _interviewed_mock(request: HttpRequest, mock_id: int) -> MockInterview:
    """Only the user bound by the invite; the candidate and everyone else get a 404."""
    return get_object_or_404(
        MockInterview.objects.select_related("loop", "user"),
        pk=mock_id,
        interviewer=request.user,
    )


def snapshot(mock_id: int) -> dict:
    """What the candidate has typed so far, from the DB: {item: {slot: text}} + current."""
    texts: dict[int, dict[str, str]] = {}
    times: dict[int, dict[str, int]] = {}
    current = None
    items = MockItem.objects.filter(mock_id=mock_id).select_related("attempt", "question")
    for item in items.prefetch_related("follow_up_answers", "attempt__step_answers"):
        slots: dict[str, str] = {}
        stamps: dict[str, int] = {}
        if item.attempt is not None:
            attempt = item.attempt
            slots["main"] = attempt.answer or attempt.draft
            stamps["main"] = live.stamp_ms(attempt.submitted or attempt.draft_saved)
            answered = {a.step_name: a.raw for a in attempt.step_answers.all()}
            steps = {**(item.step_drafts or {}), **answered}
            if steps:
                slots["steps"] = "\n".join(f"{k}: {v}" for k, v in steps.items())
                stamps["steps"] = live.stamp_ms(item.step_drafts_saved)
        for row in item.follow_up_answers.all():
            slots[f"fu-{row.index}"] = row.answer or row.draft
            stamps[f"fu-{row.index}"] = live.stamp_ms(row.submitted or row.draft_saved)
        texts[item.order] = slots
        times[item.order] = stamps
        if item.started is not None and item.closed is None:
            current = item.order
    return {"texts": texts, "times": times, "current": current}


def _stepwise_view(item: MockItem) -> tuple[str, list[practice.StepView]]:
    """An arithmetic item's prompt with the candidate's numbers, and its steps with each
    reference answer for the interviewer; ("", []) for other questions or before the item
    starts."""
    if not practice.grader_for(item.question).stepwise or item.attempt is None:
        return "", []
    context = practice.attempt_context(item.attempt)
    return practice.prompt_html(context), practice.step_views(context, reveal=True)


def _with_suggestions(item: MockItem, rubric: list[dict]) -> list[dict]:
    """Each rubric row with the machine's verdict once the answer is graded (a suggestion
    for the interviewer's tick, never the tick itself) and the point's check as a probe to
    ask, with what passes."""
    attempt = item.attempt
    graded = attempt is not None and attempt.graded is not None
    lines = [
        practice.RubricLine(r["point"].text, r["point"].weight, r["point"].penalty) for r in rubric
    ]
    verdicts = practice.point_rows(attempt.result or {}, lines) if graded else [None] * len(rubric)
    return [
        r | {"suggestion": verdict, "probe": practice.check_spec(r["point"])}
        for r, verdict in zip(rubric, verdicts, strict=True)
    ]


@login_required
def interviewer_page(request: HttpRequest, mock_id: int) -> HttpResponse:
    mock = _interviewed_mock(request, mock_id)
    items = list(
        mock.items.select_related("question", "attempt").prefetch_related("question__rubric")
    )
    state = snapshot(mock.pk)
    rows = []
    for item in items:
        stepwise = practice.grader_for(item.question).stepwise
        prompt_html, references = _stepwise_view(item)
        texts = state["texts"].get(item.order, {})
        marked = set(item.interviewer_points or [])
        rows.append(
            {
                "item": item,
                "question": item.question,
                "stepwise": stepwise,
                "prompt_html": prompt_html or item.question.prompt_html,
                "references": references,
                "main": texts.get("steps" if stepwise else "main", ""),
                "follow_ups": [
                    {"index": i, "prompt": p, "text": texts.get(f"fu-{i}", "")}
                    for i, p in enumerate(item.question.follow_up_prompts())
                ],
                "rubric": [
                    {"index": i, "point": p, "marked": i in marked}
                    for i, p in enumerate(item.question.rubric.all())
                ],
            }
        )
    for row in rows:
        row["rubric"] = _with_suggestions(row["item"], row["rubric"])
    return render(
        request,
        "mock/interviewer.html",
        {"mock": mock, "rows": rows, "current": state["current"]},
    )


@login_required
@require_POST
def mark(request: HttpRequest, mock_id: int, order: int) -> HttpResponse:
    mock = _interviewed_mock(request, mock_id)
    item = get_object_or_404(
        MockItem.objects.select_related("mock", "question"), mock=mock, order=order
    )
    # isdecimal, not isdigit: "²" is a digit int() refuses; 9 digits keep int() in its limit
    points = [int(p) for p in request.POST.getlist("point") if p.isdecimal() and len(p) < 10]
    raw_score = request.POST.get("score_10", "").strip()
    try:
        score_10 = float(raw_score) if raw_score else None
    except ValueError:
        score_10 = None
    if score_10 is not None and not math.isfinite(score_10):  # "nan" scored as 10/10
        score_10 = None
    item = services.interviewer_mark(
        item=item,
        user=request.user,
        points=points,
        notes=request.POST.get("notes", ""),
        score_10=score_10,
    )
    score = "—" if item.interviewer_score is None else f"{round(item.interviewer_score * 10, 1)}/10"
    return HttpResponse(f'<span class="saved">Saved · your score {score}</span>')


# ---------------------------------------------------------------- SSE (ASGI only)


def _changed_events(state: dict, sent: dict[tuple[int, str], tuple[int, str]]) -> list[str]:
    """`answer` events for the boxes whose text (or save time) differs from what this
    connection last sent; `sent` is updated."""
    events = []
    for order, slots in state["texts"].items():
        for slot, text in slots.items():
            t = state["times"][order][slot]
            if sent.get((order, slot)) == (t, text):
                continue
            sent[(order, slot)] = (t, text)
            events.append(sse.event("answer", {"item": order, "slot": slot, "text": text, "t": t}))
    return events


async def events(request: HttpRequest, mock_id: int) -> HttpResponse:
    """text/event-stream for the interviewer: a DB snapshot of every answer box, then each
    box as it changes (`answer`, its text read from the DB), question changes (`item`) and
    `end`."""
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponseForbidden("Log in to watch a mock.")
    mock = await MockInterview.objects.filter(pk=mock_id, interviewer_id=user.pk).afirst()
    if mock is None:
        raise Http404("No such mock")
    return sse.response(_stream(mock_id))


async def _stream(mock_id: int):
    """The text always comes from the DB: an `answer` notice in the Redis stream says a box
    changed, and the DB is read then. Notices are coalesced (live.COALESCE_MS per box), so a
    save made just after a notice has none of its own: the DB is read again COALESCE_MS
    (+ margin) after the last notice, which sees it (its commit came before its gate check,
    which failed because the gate was still up). Every RESYNC_EVERY quiet reads (~10 s) it
    is read anyway, so even saves whose notice Redis refused (full, OOM) arrive."""
    sent: dict[tuple[int, str], tuple[int, str]] = {}
    loop = asyncio.get_running_loop()
    # Without Redis the DB is read every 2 s.
    async with sse.StreamTail(
        live.key(mock_id), label=f"mock {mock_id}", count=200, fallback_s=2.0
    ) as tail:
        await tail.start()  # where the stream stands now: tail from here after the snapshot
        state = await sync_to_async(snapshot)(mock_id)
        for event in _changed_events(state, sent):
            yield event
        yield sse.event("item", {"item": state["current"]})
        # When to read the DB for saves coalesced away (also behind a notice sent just
        # before this connection's snapshot).
        reread_at: float | None = loop.time() + (live.COALESCE_MS + REREAD_MARGIN_MS) / 1000
        while True:
            mock = await MockInterview.objects.aget(pk=mock_id)
            if mock.finished is not None:
                break
            block = sse.BLOCK_MS
            if reread_at is not None:
                block = max(1, min(block, int((reread_at - loop.time()) * 1000)))
            entries = await tail.read(block)
            changed = not tail.live
            for _, fields in entries:
                kind, data = live.decode_entry(fields)
                if kind == "answer":  # the text is in the DB (an old entry's is ignored)
                    changed = True
                    reread_at = loop.time() + (live.COALESCE_MS + REREAD_MARGIN_MS) / 1000
                else:
                    yield sse.event(kind, data)
            if reread_at is not None and loop.time() >= reread_at:
                changed, reread_at = True, None
            if tail.quiet and tail.quiet % RESYNC_EVERY == 0:
                changed = True
            if changed:
                state = await sync_to_async(snapshot)(mock_id)
                for event in _changed_events(state, sent):
                    yield event
            if keepalive := tail.keepalive():
                yield keepalive
        yield sse.event("end", {})
