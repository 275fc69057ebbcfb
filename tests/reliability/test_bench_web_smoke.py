"""bench/web.py end to end, small: 3 learners for 10 s and one lab user in headless Chromium
against uvicorn (ASGI) and a real Celery worker. Every request and the lab run must succeed,
and the lab's points must come back with their write, SSE-receive and draw times (the
latency the full bench reports). A smoke test of the bench: no speed is asserted."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from bench import web
from lab.loadgen.runner import run_blocking
from lab.models import LabRun
from trainer.grading import rubric

pytestmark = [
    pytest.mark.browser,
    pytest.mark.celery_integration,
    pytest.mark.django_db(transaction=True),
]
# ~500 points, ~2 s on a quiet core: most are written after the run page is open (slower here
# than alone: this process also serves the pages, grades answers and runs the worker).
LAB = "kv-cache-growth:tokens=256,every=2"


@pytest.fixture
def site(settings, redis_url, live_worker, asgi_server):
    settings.REDIS_URL = redis_url
    # Every simulated learner comes from 127.0.0.1: the per-address limits would count them
    # together (the bench's docstring says to start the server with these off).
    settings.RATELIMITS = {**settings.RATELIMITS, "signup-ip": None, "login-ip": None}
    call_command("load_bank", verbosity=0)
    # As `make run` does at start-up (trainer/asgi.py): the first submit does not load the
    # rubric model in this process, which also runs the worker, while the window is open.
    rubric.embed(["warm up"])
    return asgi_server


def test_bench_web_runs_learners_and_a_live_lab_without_errors(site, capsys):
    result = run_blocking(
        web.run(
            site,
            users=3,
            seconds=10,
            think=(0.2, 0.6),
            ramp=1,
            labs=(LAB,),
            mock_share=0.5,
            lab_grace_s=15,  # then a run still going is cancelled (the bench: at once)
        )
    )
    errors = web.report(result, web_args(users=3, seconds=10))
    out = capsys.readouterr().out
    print(out)  # the bench's tables, shown when the test fails
    assert errors == result.error_count == 0 and "Errors: 0." in out
    pages = result.rec.latency
    for kind in ("log in (PBKDF2 check)", "home", "topic page", "question page", "mock start"):
        assert pages[kind], f"no {kind!r} request was made"
    # The lab user started a run through the form and drew its points live.
    # (again and again until the window closes: a quiet machine finishes a small run in
    # ~4 s and starts a second one, so count at least one, each ended)
    assert result.lab.runs and all(r.status in ("done", "cancelled") for r in result.lab.runs)
    assert LabRun.objects.filter(pk__in=[r.run_id for r in result.lab.runs]).count() == len(
        result.lab.runs
    )
    live = sum(r.live_points for r in result.lab.runs)
    assert live > 0 and len(result.lab.to_drawn) == len(result.lab.to_received) == live
    # Drawn after it was received, received after it was written (one machine, one clock;
    # Date.now() has 1 ms steps, so allow 1 ms).
    assert all(d >= r - 1 for d, r in zip(result.lab.to_drawn, result.lab.to_received, strict=True))
    assert all(r >= -1 for r in result.lab.to_received)
    assert f"| point written -> drawn on the chart | {live} | " in out
    # Practice page views pooled apart from grading and login; each run's conditions (as its
    # page shows them, recorded by the worker) in the lab table.
    views = web.practice_views(result.rec)
    assert views and len(views) == sum(len(result.rec.latency[k]) for k in web.PRACTICE_PAGE_VIEWS)
    assert f"Practice page views ({', '.join(web.PRACTICE_PAGE_VIEWS)}): {len(views)}, " in out
    for run in result.lab.runs:
        stored = LabRun.objects.get(pk=run.run_id).conditions
        assert run.nice == stored["nice"] and "CPU share" in run.conditions
        assert f"| {run.worker} | {run.nice} | {run.cpu_share:.0f} |" in out


def web_args(**kw):
    import argparse

    defaults = dict(
        base_url="http://test", ramp=1, think_min=0.2, think_max=0.6, mock_share=0.5,
        lab=[LAB],
    )  # fmt: skip
    return argparse.Namespace(**(defaults | kw))
