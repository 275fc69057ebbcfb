"""Redis stopped while the site is up, then started again (real processes: our own
`redis-server` on a free port, `uvicorn trainer.asgi:application` and `celery -A trainer
worker` on it and on the test database).

While Redis is down: practice (scenario draft, submit and grade; an arithmetic step), mock
interviews (start, autosave, answer, next) and the progress page answer without a 500; a
lab submission is refused with a clear message and records nothing; /healthz says 503
"down"; a live lab chart keeps receiving its points (the SSE view polls the DB). Redis
comes back empty on the same port: the worker reconnects by itself, the run whose message
Redis lost is sent again from the DB, a new run streams through Redis again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from procs import Procs, RedisServer, free_port, wait_for

from lab.models import LabRun
from mock.models import MockInterview
from questions import problems
from questions.models import Question
from questions.services import problem_spec
from trainer import services as trainer_services
from trainer.models import Attempt, StepAnswer

pytestmark = [pytest.mark.celery_integration, pytest.mark.django_db(transaction=True)]

PASSWORD = "redis-is-not-the-database"
LAB = "kv-cache-growth"
# Long enough to be mid-run when Redis is stopped (hundreds of points), short otherwise.
LONG_KV = {"tokens": "512", "prompt_tokens": "16", "every": "8", "block_size": "8"}
TINY_KV = {"tokens": "32", "prompt_tokens": "16", "every": "8", "block_size": "8"}
SCENARIO = "kv-arith-llama3-70b-node"
ARITHMETIC = "kv-arith-sequences-that-fit"
LOOP = "inference-warm-up"
HEALTHZ_TOKEN = "redis-fault-token"
PUBLIC_DOWN = {"status": "down", "database": {"ok": True}, "redis": {"ok": False}}


class Site:
    """A learner's HTTP session against the real server; every response is kept, so the
    test can say that none was a 500."""

    def __init__(self, base: str) -> None:
        # A generous read timeout only so that a hang fails the test instead of stalling it.
        self.http = httpx.Client(base_url=base, timeout=90.0, follow_redirects=False)
        self.responses: list[tuple[str, str, int]] = []

    def get(self, url: str, **kw) -> httpx.Response:
        response = self.http.get(url, **kw)
        self.responses.append(("GET", url, response.status_code))
        return response

    def post(self, url: str, data: dict | None = None, **kw) -> httpx.Response:
        if "csrftoken" not in self.http.cookies:
            self.get("/accounts/login/")
        headers = {"X-CSRFToken": self.http.cookies["csrftoken"], **kw.pop("headers", {})}
        response = self.http.post(url, data=data or {}, headers=headers, **kw)
        self.responses.append(("POST", url, response.status_code))
        return response

    def log_in(self, username: str) -> None:
        response = self.post("/accounts/login/", {"username": username, "password": PASSWORD})
        assert response.status_code == 302, response.text[:500]

    def server_errors(self) -> list[tuple[str, str, int]]:
        # 503 is the answer asked for where this test expects it (/healthz, a lab start).
        return [r for r in self.responses if r[2] >= 500 and r[2] != 503]

    def start_lab(self, params: dict) -> LabRun:
        response = self.post(f"/lab/{LAB}/", params)
        assert response.status_code == 302, response.text[:2000]
        return LabRun.objects.get(pk=int(response.headers["location"].strip("/").split("/")[-1]))


class EventStream(threading.Thread):
    """Reads a run's text/event-stream to its `end` event, as an EventSource would."""

    def __init__(self, site: Site, run_id: int) -> None:
        super().__init__(daemon=True)
        self.url = f"{str(site.http.base_url).rstrip('/')}/lab/runs/{run_id}/events"
        self.cookies = site.http.cookies
        self.points: list[tuple[int, float]] = []  # (seq, when received)
        self.statuses: list[str] = []
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        timeout = httpx.Timeout(10.0, read=30.0)  # keep-alives come at least every ~15 s
        try:
            with (
                httpx.Client(cookies=self.cookies, timeout=timeout) as http,
                http.stream("GET", self.url) as response,
            ):
                assert response.status_code == 200, response.status_code
                event: dict[str, str] = {}
                for line in response.iter_lines():
                    if line.startswith(":"):
                        continue
                    if line:
                        name, _, value = line.partition(":")
                        event[name] = value.removeprefix(" ")
                        continue
                    kind, data = event.get("event"), json.loads(event.get("data", "{}"))
                    event = {}
                    if kind == "point":
                        self.points.append((data["seq"], time.monotonic()))
                    elif kind in ("status", "end"):
                        self.statuses.append(data["status"])
                    if kind == "end":
                        self.ended.set()
                        return
        except BaseException as exc:  # reported by the test
            self.error = exc

    def count(self) -> int:
        assert self.error is None, f"the event stream broke: {self.error!r}"
        return len(self.points)

    def wait_end(self, timeout: float) -> None:
        assert self.ended.wait(timeout), f"no `end` within {timeout} s (error: {self.error!r})"

    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.points]


def llama70_seed(question) -> int:
    """A seed whose variant is Llama-3-70B with a BF16 cache (320 KiB per token)."""
    spec = problem_spec(question.problem)
    for seed in range(1000):
        choices = problems.draw_variant(spec, seed).choices
        if choices["model"] == "llama-3-70b" and choices["kvdtype"] == "bf16":
            return seed
    raise AssertionError("no Llama-3-70B BF16 variant")


def test_sessions_and_caches_do_not_depend_on_redis():
    """Sessions live in the database; the default cache is per process; a cache kept in
    Redis (the rate-limit counters) answers "nothing cached" at once when Redis is down
    instead of raising."""
    from django.utils.module_loading import import_string

    assert settings.SESSION_ENGINE in (
        "django.contrib.sessions.backends.db",
        "django.contrib.sessions.backends.signed_cookies",
    )
    assert "redis" not in settings.CACHES["default"]["BACKEND"].lower()
    dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    for alias, config in settings.CACHES.items():
        if "redis" not in f"{config['BACKEND']} {config.get('LOCATION', '')}".lower():
            continue
        backend = import_string(config["BACKEND"])
        cache = backend(dead, {k: v for k, v in config.items() if k != "LOCATION"})
        assert cache.get("probe") is None, alias  # none of these may raise
        cache.add("probe", 0)
        with contextlib.suppress(ValueError):  # "key not found": an ordinary miss
            cache.incr("probe")


def test_the_site_keeps_working_while_redis_is_down_and_recovers_when_it_returns(tmp_path):
    call_command("load_bank", verbosity=0)
    user = get_user_model().objects.create_user("ada", password=PASSWORD)
    arithmetic_q = Question.objects.get(slug=ARITHMETIC)
    arithmetic = trainer_services.attempt_start(
        user=user, question=arithmetic_q, seed=llama70_seed(arithmetic_q)
    )
    redis_server = RedisServer(log_dir=tmp_path).start()
    try:
        with Procs(redis_server.url) as procs:
            # One torch thread: the labs' tiny models only contend on a shared machine.
            worker = procs.worker("redisfault", queues="default,lab-cpu", OMP_NUM_THREADS="1")
            # The real rubric grader; the token shows /healthz's details.
            web = procs.web(free_port(), TRAINER_WARM_GRADER="1", HEALTHZ_TOKEN=HEALTHZ_TOKEN)
            site = Site(web.info["url"])
            site.log_in("ada")

            # --- Redis up: a long run streams live; a second run waits behind it.
            long_run = site.start_lab(LONG_KV)
            live = EventStream(site, long_run.pk)
            queued_run = site.start_lab(TINY_KV)
            wait_for(lambda: live.count() >= 3, 120, "live points of the long run")
            assert LabRun.objects.get(pk=queued_run.pk).status == "queued"

            # --- Redis stopped (SIGKILL: no shutdown, every socket closed).
            # The worker is paused around the kill, so the points measured from here on are
            # surely written after Redis is gone, however fast this machine is.
            os.killpg(worker.pid, signal.SIGSTOP)
            redis_server.kill()
            killed_at = time.monotonic()
            measured_before = LabRun.objects.get(pk=long_run.pk).points.count()
            os.killpg(worker.pid, signal.SIGCONT)

            assert site.get("/healthz").json() == PUBLIC_DOWN  # public: up/down only
            health = site.get("/healthz", headers={"X-Healthz-Token": HEALTHZ_TOKEN})
            assert health.status_code == 503
            report = health.json()
            assert report["status"] == "down" and report["redis"]["ok"] is False
            assert report["redis"]["error"] and report["database"]["ok"] is True

            # A new session: logging in needs no Redis.
            before, site = site, Site(web.info["url"])
            site.log_in("ada")

            # Practice, scenario: open, autosave, submit, graded.
            response = site.get(f"/practice/{SCENARIO}/")
            assert response.status_code == 302
            attempt_url = response.headers["location"]
            attempt = Attempt.objects.get(pk=int(attempt_url.strip("/").split("/")[-1]))
            draft = "Per token: 2 x 80 layers x 8 KV heads x 128 x 2 bytes"
            response = site.post(f"{attempt_url}draft/", {"answer": draft})
            assert "Draft saved" in response.text
            assert Attempt.objects.get(pk=attempt.pk).draft == draft
            answer = Question.objects.get(slug=SCENARIO).model_answer
            assert site.post(f"{attempt_url}submit/", {"answer": answer}).status_code == 302
            attempt.refresh_from_db()
            assert attempt.answer == answer and attempt.graded and attempt.score >= 0.6
            page = site.get(attempt_url).text
            if "Quick checks" in page:  # points the grader could not settle: skip the round
                assert site.post(f"{attempt_url}checks/", {"skip": "1"}).status_code == 302
                page = site.get(attempt_url).text
            assert "Model answer" in page

            # Practice, arithmetic: one step checked in place and stored.
            response = site.post(
                f"/attempts/{arithmetic.pk}/steps/kv_kib_per_token/",
                {"answer": "0.3125 MiB"},
                headers={"HX-Request": "true"},
            )
            assert response.text.lstrip().startswith('<li class="step step-correct"')
            step = StepAnswer.objects.get(attempt=arithmetic, step_name="kv_kib_per_token")
            assert (step.value, step.verdict) == (320.0, "correct")

            # Mock interview: start, autosave, answer, next question.
            response = site.post(f"/mock/loops/{LOOP}/start/")
            assert response.status_code == 302
            mock_url = response.headers["location"]
            mock = MockInterview.objects.get(pk=int(mock_url.strip("/").split("/")[-1]))
            assert site.get(mock_url).status_code == 200  # starts the question's clock
            first = mock.items.get(order=0)
            response = site.post(f"{mock_url}items/0/draft/", {"slot": "main", "answer": "KV"})
            assert "Saved" in response.text
            mock_answer = first.question.model_answer
            response = site.post(f"{mock_url}items/0/answer/", {"answer": mock_answer})
            assert response.status_code == 302
            assert site.post(f"{mock_url}items/0/next/").status_code == 302
            page = site.get(mock_url)
            assert page.status_code == 200 and 'id="question-clock"' in page.text
            first.refresh_from_db()
            assert first.attempt.answer == mock_answer and first.closed is not None
            assert mock.items.get(order=1).started is not None  # the next question is on

            # Progress dashboard and the lab pages that only read the DB.
            assert site.get("/progress/").status_code == 200
            assert site.get("/lab/runs/").status_code == 200
            assert site.get(f"/lab/runs/{long_run.pk}/").status_code == 200

            # A lab submission is refused, clearly, and leaves nothing behind.
            runs_before = set(LabRun.objects.values_list("pk", flat=True))
            response = site.post(f"/lab/{LAB}/", TINY_KV)
            assert response.status_code == 503
            assert "The lab queue is unavailable" in response.text
            assert 'value="32"' in response.text  # the typed parameters are kept
            assert set(LabRun.objects.values_list("pk", flat=True)) == runs_before

            # The long run's live stream went on from the DB: every point once, in order.
            live.wait_end(300)
            long_run.refresh_from_db()
            assert long_run.status == "done", long_run.error
            total = long_run.points.count()
            assert live.seqs() == list(range(total))
            assert total > measured_before  # these could only come from the DB
            print(f"\nlong run: {total} points, {total - measured_before} after Redis stopped")

            # A viewer who opens the queued run's stream now gets it from the DB too.
            waiting = EventStream(site, queued_run.pk)
            time.sleep(1.0)
            assert waiting.error is None and not waiting.ended.is_set()
            assert LabRun.objects.get(pk=queued_run.pk).status == "queued"

            # --- Redis back, empty, on the same port; web and worker are not restarted.
            redis_server.start()
            down_s = time.monotonic() - killed_at
            # The worker reconnects and sends the lost message again (the DB said `queued`).
            waiting.wait_end(240)
            queued_run.refresh_from_db()
            assert queued_run.status == "done", queued_run.error
            assert queued_run.worker == worker.info["node"]
            assert waiting.seqs() == list(range(queued_run.points.count()))
            assert waiting.seqs(), "the requeued run produced no point"
            assert "queued again" in worker.output(tail=200_000)
            print(
                f"Redis down {down_s:.1f} s; requeued run done {time.monotonic() - killed_at:.1f} s after the kill"
            )

            # A run submitted after the recovery is queued, runs, and streams through Redis.
            new_run = site.start_lab(TINY_KV)
            fresh = EventStream(site, new_run.pk)
            fresh.wait_end(120)
            new_run.refresh_from_db()
            assert new_run.status == "done", new_run.error
            assert fresh.seqs() == list(range(new_run.points.count()))
            entries = redis.Redis.from_url(redis_server.url).xrange(f"lab:run:{new_run.pk}")
            kinds = [fields[b"kind"] for _, fields in entries]
            assert kinds.count(b"point") == new_run.points.count()  # published live again

            def healthy():
                report = site.get("/healthz", headers={"X-Healthz-Token": HEALTHZ_TOKEN}).json()
                return report["status"] == "ok" and report

            report = wait_for(healthy, 20, "/healthz ok")
            assert worker.info["node"] in [w["name"] for w in report["celery"]["workers"]]
            assert before.server_errors() == [] and site.server_errors() == []
            assert web.alive() and worker.alive()
    finally:
        redis_server.kill()


def test_a_lab_run_is_refused_at_once_and_not_recorded_when_redis_does_not_answer(settings):
    from lab import services

    user = get_user_model().objects.create_user("bo", password=PASSWORD)
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with pytest.raises(services.QueueUnavailable, match="The lab queue is unavailable"):
        services.start_run(user, LAB, dict(TINY_KV))
    assert not LabRun.objects.exists()


def test_only_queued_runs_whose_message_is_gone_are_sent_again(settings, redis_url):
    """requeue_lost_runs reads the broker itself: a message still waiting is left alone; one
    deleted from Redis is sent again with the same task id; cancelled runs are not."""
    from procs import QueueToOurselves

    from lab import broker, runner, services
    from trainer.celery import app

    settings.REDIS_URL = redis_url
    user = get_user_model().objects.create_user("cy", password=PASSWORD)
    with QueueToOurselves("lab-cpu"):  # no in-process worker takes these messages
        try:
            run = services.start_run(user, LAB, dict(TINY_KV))
            other = services.start_run(user, LAB, dict(TINY_KV))
            services.cancel_run(other)
            assert run.task_id in broker.task_ids_in_broker({"lab-cpu"})
            assert runner.requeue_lost_runs(grace_s=0) == []  # still in the queue
            redis.Redis.from_url(redis_url).delete("lab-cpu")  # as a Redis restart would
            assert run.task_id not in broker.task_ids_in_broker({"lab-cpu"})
            assert runner.requeue_lost_runs(grace_s=60) == []  # too young to tell
            assert runner.requeue_lost_runs(grace_s=0) == [run.pk]
            assert run.task_id in broker.task_ids_in_broker({"lab-cpu"})
            assert runner.requeue_lost_runs(grace_s=0) == []  # sent once, not twice
        finally:
            LabRun.objects.filter(status="queued").update(status="cancelled")
            app.control.purge()
