"""Lab pages: catalog, run form, live run page (+ its SSE stream), my runs, staff queue."""

from __future__ import annotations

import csv
import json

from asgiref.sync import sync_to_async
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from common import ratelimits, sse
from lab import broker, services
from lab.labs import LABS, LabParamError, get_lab
from lab.models import LabPoint, LabRun
from questions.models import Question, Topic


def _questions_by_lab() -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = {slug: [] for slug in LABS}
    for q in Question.objects.published().select_related("topic").order_by("topic__order", "order"):
        for slug in q.related_labs or ():
            if slug in out:
                out[slug].append(q)
    return out


@login_required
def catalog(request: HttpRequest) -> HttpResponse:
    questions = _questions_by_lab()
    topics = {t.slug: t for t in Topic.objects.all()}
    labs = [
        {
            "lab": lab,
            "questions": questions[slug],
            "topics": [topics[t] for t in lab.topics if t in topics],
        }
        for slug, lab in LABS.items()
    ]
    return render(request, "lab/catalog.html", {"labs": labs})


@login_required
def lab_form(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        lab = get_lab(slug)
    except KeyError:
        raise Http404(f"No lab {slug!r}") from None
    values = {p.name: p.default for p in lab.params}
    errors: dict[str, str] = {}
    refusal = ""
    status = 200
    limited = None
    if request.method == "POST":
        values = {p.name: request.POST.get(p.name, "") for p in lab.params}
        if any(p.kind == "bool" for p in lab.params):  # unchecked boxes are absent
            values.update({p.name: p.name in request.POST for p in lab.params if p.kind == "bool"})
        # Runs started per learner (a form sent back to fix does not count).
        limited = ratelimits.full(request, "lab-run", ratelimits.user_id)
        if limited:  # the form comes back with the values typed and when to try again
            refusal, status = ratelimits.lab_message(limited), 429
        else:
            try:
                run = services.start_run(request.user, slug, values, gpu="gpu" in request.POST)
            except LabParamError as exc:
                errors = exc.errors
                status = 400
            except services.RunRefused as exc:  # QueueUnavailable: the broker is down (503)
                refusal = str(exc)
                status = 503 if isinstance(exc, services.QueueUnavailable) else 400
            else:
                ratelimits.hit(request, "lab-run", ratelimits.user_id)
                return redirect("lab_run", run_id=run.pk)
    fields = [
        {"param": p, "value": values.get(p.name, p.default), "error": errors.get(p.name, "")}
        for p in lab.params
    ]
    general = {k: v for k, v in errors.items() if k not in {p.name for p in lab.params}}
    response = render(
        request,
        "lab/form.html",
        {
            "lab": lab,
            "fields": fields,
            "general_errors": general,
            "refusal": refusal,
            "questions": _questions_by_lab()[slug],
            "status": status,
        },
        status=status,
    )
    return ratelimits.with_retry_after(response, limited) if limited else response


def _own_run(request: HttpRequest, run_id: int) -> LabRun:
    run = get_object_or_404(LabRun, pk=run_id)
    if not services.can_view(request.user, run):
        raise Http404("No such run")  # do not reveal other users' runs exist
    return run


@login_required
def run_page(request: HttpRequest, run_id: int) -> HttpResponse:
    services.reap_stale_runs()
    run = _own_run(request, run_id)
    lab = get_lab(run.lab)
    points = [services.point_payload(p) for p in run.points.order_by("seq")]
    page = {
        "run": run.pk,
        "lab": lab.describe(),
        "predicted": services.predicted_points(run),
        "points": points,
        "status": services.status_payload(run),
        "events_url": reverse("lab_run_events", args=[run.pk]),
        "cancel_url": reverse("lab_run_cancel", args=[run.pk]),
    }
    status = page["status"]
    params = [(p, run.params.get(p.name)) for p in lab.params]
    return render(
        request,
        "lab/run.html",
        {
            "run": run,
            "lab": lab,
            "page": page,
            "params": params,
            "questions": _questions_by_lab()[run.lab],
            "summary_rows": status["summary_rows"],
            "verdicts": status["verdicts"],
            "cancelling": run.status == LabRun.Status.RUNNING and run.cancel_requested,
        },
    )


@login_required
def run_points_csv(request: HttpRequest, run_id: int) -> HttpResponse:
    """Every point of a run (measured and predicted-by-point) as CSV, extra as JSON."""
    run = _own_run(request, run_id)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="lab-run-{run.pk}-{run.lab}.csv"'
    writer = csv.writer(response)
    writer.writerow(["seq", "series", "x", "y", "extra"])
    for p in run.points.order_by("seq"):
        writer.writerow([p.seq, p.series, repr(p.x), repr(p.y), json.dumps(p.extra)])
    return response


@login_required
@require_POST
def run_cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    run = _own_run(request, run_id)
    if not services.can_cancel(request.user, run):
        raise PermissionDenied("Only the run's owner or a lab operator can cancel it.")
    run = services.cancel_run(run)
    if request.htmx or request.headers.get("Accept") == "application/json":
        return HttpResponse(
            json.dumps(services.status_payload(run)), content_type="application/json"
        )
    messages.info(request, f"Run #{run.pk}: cancel requested ({run.get_status_display()}).")
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("lab_run", args=[run.pk])  # never an open redirect to another site
    return redirect(back)


@login_required
def my_runs(request: HttpRequest) -> HttpResponse:
    services.reap_stale_runs()
    runs = LabRun.objects.filter(owner=request.user).order_by("-created")[:200]
    return render(request, "lab/my_runs.html", {"runs": runs, "labs": LABS})


@login_required
@permission_required("lab.view_labrun", raise_exception=True)  # operators, not authors
def queue_view(request: HttpRequest) -> HttpResponse:
    services.reap_stale_runs()
    runs = (
        LabRun.objects.filter(status__in=services.ACTIVE)
        .select_related("owner")
        .order_by("created")
    )
    workers = broker.workers_online()
    for w in workers:
        last = LabRun.objects.filter(worker=w["name"]).exclude(device="").order_by("-started")
        w["device"] = last.values_list("device", flat=True).first() or "(no run yet)"
    return render(request, "lab/queue.html", {"runs": runs, "workers": workers, "labs": LABS})


# ---------------------------------------------------------------- SSE (ASGI only)


async def run_events(request: HttpRequest, run_id: int) -> HttpResponse:
    """text/event-stream of a run: `point` events (id = seq) after the client's last seq,
    `status` events, then `end`. Catch-up comes from the DB (durable, complete), live
    points from the Redis Stream; seqs already sent are skipped, so nothing is lost or
    repeated across reconnects."""
    user = await request.auser()
    if not user.is_authenticated:
        return HttpResponseForbidden("Log in to watch a lab run.")
    run = await LabRun.objects.filter(pk=run_id).afirst()
    if run is None or not await sync_to_async(services.can_view)(user, run):
        raise Http404("No such run")
    return sse.response(_stream(run_id, sse.last_event_id(request)))


async def _db_points(run_id: int, after: int) -> list[dict]:
    rows = LabPoint.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")
    return [services.point_payload(p) async for p in rows]


async def _stream(run_id: int, last: int):
    tail = sse.StreamTail(
        broker.stream_key(run_id), label=f"run {run_id}", count=500, fallback_s=1.0
    )
    async with tail:
        await tail.start()  # where the stream stands now: tail from here after the DB catch-up
        for p in await _db_points(run_id, last):
            last = p["seq"]
            yield sse.event("point", p, last)
        run = await LabRun.objects.aget(pk=run_id)
        yield sse.event("status", services.status_payload(run))
        while run.status not in services.TERMINAL:
            entries = await tail.read()
            for _, fields in entries:
                kind, data = broker.decode_entry(fields)
                if kind != "point":
                    yield sse.event("status", data)
                    continue
                if data["seq"] <= last:
                    continue
                if data["seq"] > last + 1:  # a gap (trimmed stream): fill from the DB
                    for p in await _db_points(run_id, last):
                        if p["seq"] < data["seq"]:
                            last = p["seq"]
                            yield sse.event("point", p, last)
                last = data["seq"]
                written = broker.written_ms(fields)
                yield sse.event(
                    "point", data if written is None else {**data, "written_ms": written}, last
                )
            if entries:
                run = await LabRun.objects.aget(pk=run_id)
                continue
            if keepalive := tail.keepalive():
                yield keepalive
            await sync_to_async(services.reap_stale_runs)()
            run = await LabRun.objects.aget(pk=run_id)
            if not tail.live or run.status in services.TERMINAL:
                for p in await _db_points(run_id, last):  # anything the stream missed
                    last = p["seq"]
                    yield sse.event("point", p, last)
        run = await LabRun.objects.aget(pk=run_id)
        for p in await _db_points(run_id, last):
            last = p["seq"]
            yield sse.event("point", p, last)
        yield sse.event("end", services.status_payload(run))
