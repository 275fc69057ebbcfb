"""Web load: simulated learners and live lab runs against a running server (`make run`).

    python -m bench.web [--base-url http://127.0.0.1:8000] [--users 50] [--seconds 300]
                        [--lab SLUG:param=value,...]... [--no-lab]

Start the server for it with two lab runs at once and the per-address rate limits off (every
simulated learner comes from 127.0.0.1; docs/OPERATIONS.md "Rate limits"):

    RATELIMIT_SIGNUP_IP=off RATELIMIT_LOGIN_IP=off RATELIMIT_LAB_RUN=off \\
        python -m manage run_all --concurrency 2

Each learner signs up (its own account), then loops until time is up: home page, a topic
page, a question (the practice redirect and the attempt page), an autosave of a draft, and
a submitted answer (scenario: rubric-graded; arithmetic: one step checked), sometimes the
progress page, sometimes a mock interview step (start a loop once, then its timed question
page and an autosave), with a think time between actions (default 2-5 s; people reading a
question take far longer). Latency per page kind is client-measured (request sent -> full
response read); a response with an unexpected status is an error.

Meanwhile each `--lab` (default two) is a learner in a real headless Chromium: it starts
the lab through the lab form, keeps the live run page open until the run ends, and starts
it again until the window closes (a run still going then is cancelled). For every point it
drew, the page records (static/js/lab_run.js, `window.__labDrawn`) when the SSE message
arrived and when Plotly had drawn it; the worker's write time comes with the point (the
Redis stream entry's `t`, lab/broker.py). Same machine, same wall clock: the bench reports
point written -> SSE received and point written -> drawn. Points replayed from the DB when
the page opens carry no write time and are left out.

`--serve` starts the server itself (as above, on a free port, with a fresh VAR_DIR) and stops
it afterwards; `--compare-nice 0,10` runs one such sitting per LAB_WORKER_NICE value, one
after the other, and ends with a side-by-side table: practice page views (the GETs in
PRACTICE_PAGE_VIEWS, not submit + grading or login) beside each lab run's CPU share, nice and
point latency. Each lab run's niceness and CPU share come from its run page ("Conditions").

The command exits with status 1 if any request or lab run failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import httpx

ANSWER = (
    "Per token the cache is 2 x layers x KV heads x head_dim x bytes, so for Llama-3-70B in "
    "BF16 that is 2 x 80 x 8 x 128 x 2 = 327,680 B. Decode is bound by memory bandwidth, so "
    "we batch to amortise the weight reads, and we page the KV cache to avoid fragmentation."
)
SLUG_RE = re.compile(r'href="/practice/([a-z0-9.-]+)/"')
TOPIC_RE = re.compile(r'href="/topics/([a-z0-9.-]+)/"')
STEP_RE = re.compile(r'hx-post="(/attempts/\d+/steps/[^/"]+/)"')
LOOP_RE = re.compile(r'href="/mock/loops/([a-z0-9.-]+)/"')
MOCK_DRAFT_RE = re.compile(r'hx-post="(/mock/\d+/items/\d+/draft/)"')
MOCK_STEP_RE = re.compile(r'name="(step:[^"]+)"')
# Two lab runs with a steady stream of points: ~1,000 points in ~40 s and ~200 points in
# ~75 s on one quiet core (longer under load); each is started again when it ends.
DEFAULT_LABS = ("kv-vs-no-cache:new_tokens=496,every=2", "batching:requests=256")
KEEPALIVE_S = 3.0
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = [  # as tests/conftest.py
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
RATE_LIMIT_HINT = (
    "HTTP 429: the server's rate limits tripped (all simulated learners share one address). "
    "Start it with RATELIMIT_SIGNUP_IP=off RATELIMIT_LOGIN_IP=off RATELIMIT_LAB_RUN=off."
)


class Recorder:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.samples: dict[str, str] = {}

    def error(self, label: str, sample: str) -> None:
        self.errors[label] += 1
        self.samples.setdefault(label, sample)

    async def call(
        self,
        client: httpx.AsyncClient,
        label: str,
        method: str,
        url: str,
        expect: tuple[int, ...] | None = None,
        **kw,
    ):
        """One request; an exception, a 4xx/5xx or a status not in `expect` is an error."""
        started = time.perf_counter()
        try:
            response = await client.request(method, url, **kw)
            await response.aread()
        except httpx.HTTPError as exc:
            self.error(label, f"{method} {url}: {exc!r}")
            return None
        self.latency[label].append((time.perf_counter() - started) * 1000)
        status = response.status_code
        if status >= 400 or (expect is not None and status not in expect):
            body = " ".join(response.text.split())[:200]
            hint = f" ({RATE_LIMIT_HINT})" if status == 429 else ""
            self.error(label, f"{method} {url} -> HTTP {status}{hint}: {body}")
        return response


@dataclass
class LabRunRecord:
    user: int
    lab: str
    run_id: int
    status: str = ""
    worker: str = ""
    live_points: int = 0
    first_point_s: float | None = None  # submit clicked -> first live point drawn
    cut: bool = False  # still going when the window closed (then cancelled)
    conditions: str = ""  # the run page's "Conditions" line (lab/conditions.py)

    @property
    def nice(self) -> int | None:
        match = re.search(r"nice (-?\d+)", self.conditions)
        return int(match.group(1)) if match else None

    @property
    def cpu_share(self) -> float | None:
        match = re.search(r"CPU share (\d+) %", self.conditions)
        return float(match.group(1)) if match else None


@dataclass
class LabResult:
    runs: list[LabRunRecord] = field(default_factory=list)
    to_received: list[float] = field(default_factory=list)  # ms, point written -> SSE message
    to_drawn: list[float] = field(default_factory=list)  # ms, point written -> drawn
    no_write_time: int = 0  # points drawn that carried no write time (DB replay)
    rec: Recorder = field(default_factory=Recorder)  # browser-side errors and timings


@dataclass
class Result:
    setup: Recorder
    rec: Recorder
    lab: LabResult
    seconds: float
    cpus: int
    load_before: float
    load_after: float

    @property
    def error_count(self) -> int:
        return sum(sum(r.errors.values()) for r in (self.setup, self.rec, self.lab.rec))


def csrf(client: httpx.AsyncClient) -> dict[str, str]:
    return {"X-CSRFToken": client.cookies.get("csrftoken", "")}


async def sign_up(client: httpx.AsyncClient, rec: Recorder, delay: float) -> tuple[str, str]:
    await asyncio.sleep(delay)
    name, password = f"load-{uuid.uuid4().hex[:10]}", "kv-cache-" + uuid.uuid4().hex[:8]
    await rec.call(client, "sign-up page", "GET", "/accounts/signup/")
    await rec.call(
        client,
        "sign up (PBKDF2 hash)",
        "POST",
        "/accounts/signup/",
        expect=(302,),
        data={"username": name, "password1": password, "password2": password},
        headers=csrf(client),
    )
    client.cookies.clear()
    return name, password


async def mock_step(client, rec: Recorder, mock_url: str | None, think) -> str | None:
    """Start a mock interview (once), open its timed question page and autosave an answer.
    Returns the mock's URL, or None when there is none (the loop ended: start another)."""
    if mock_url is None:
        home = await rec.call(client, "mock home", "GET", "/mock/")
        loops = LOOP_RE.findall(home.text) if home is not None else []
        if not loops:
            return None
        start = await rec.call(
            client,
            "mock start",
            "POST",
            f"/mock/loops/{random.choice(loops)}/start/",
            expect=(302,),
            headers=csrf(client),
        )
        if start is None or "location" not in start.headers:
            return None
        mock_url = start.headers["location"]
    page = await rec.call(client, "mock question page", "GET", mock_url, expect=(200, 302))
    if page is None or page.status_code != 200:
        return None  # the loop is over (scorecard) or the page failed
    draft = MOCK_DRAFT_RE.search(page.text)
    if draft is None:
        return mock_url  # this question is answered already
    await asyncio.sleep(random.uniform(*think))
    if 'data-slot="main"' in page.text:
        data = {"slot": "main", "answer": ANSWER[:160]}
    else:
        data = {"slot": "steps"} | {name: "320 KiB" for name in MOCK_STEP_RE.findall(page.text)}
    await rec.call(
        client,
        "mock autosave",
        "POST",
        draft.group(1),
        expect=(200,),
        data=data,
        headers=csrf(client) | {"HX-Request": "true"},
    )
    return mock_url


async def learner(client, credentials, deadline, rec, think, delay, mock_share) -> None:
    await asyncio.sleep(delay)  # ramp-up: learners arrive over the first seconds
    await rec.call(client, "login page", "GET", "/accounts/login/")
    name, password = credentials
    await rec.call(
        client,
        "log in (PBKDF2 check)",
        "POST",
        "/accounts/login/",
        expect=(302,),
        data={"username": name, "password": password},
        headers=csrf(client),
    )
    home = await rec.call(client, "home", "GET", "/", expect=(200,))
    topics = TOPIC_RE.findall(home.text) if home is not None else []
    if home is not None and not topics:
        rec.error("home", "GET / listed no topic: is the bank loaded (load_bank)?")
    mock_url: str | None = None
    while time.monotonic() < deadline and topics:
        await asyncio.sleep(random.uniform(*think))
        if random.random() < mock_share:
            mock_url = await mock_step(client, rec, mock_url, think)
            continue
        topic = await rec.call(
            client, "topic page", "GET", f"/topics/{random.choice(topics)}/", expect=(200,)
        )
        slugs = SLUG_RE.findall(topic.text) if topic is not None else []
        if not slugs:
            continue
        await asyncio.sleep(random.uniform(*think))
        redirect = await rec.call(
            client, "practice redirect", "GET", f"/practice/{random.choice(slugs)}/", expect=(302,)
        )
        if redirect is None or "location" not in redirect.headers:
            continue
        attempt_url = redirect.headers["location"]
        page = await rec.call(client, "question page", "GET", attempt_url, expect=(200,))
        if page is None:
            continue
        await asyncio.sleep(random.uniform(*think))
        steps = STEP_RE.findall(page.text)
        if steps:
            await rec.call(
                client,
                "arithmetic step check",
                "POST",
                steps[0],
                expect=(200,),
                data={"answer": "320 KiB"},
                headers=csrf(client) | {"HX-Request": "true"},
            )
        elif 'name="answer"' in page.text:
            await rec.call(
                client,
                "autosave",
                "POST",
                f"{attempt_url}draft/",
                expect=(200,),
                data={"answer": ANSWER[:120]},
                headers=csrf(client) | {"HX-Request": "true"},
            )
            await asyncio.sleep(random.uniform(*think))
            await rec.call(
                client,
                "submit + rubric grading",
                "POST",
                f"{attempt_url}submit/",
                expect=(302,),
                data={"answer": ANSWER},
                headers=csrf(client),
            )
            await rec.call(client, "feedback page", "GET", attempt_url, expect=(200,))
        if random.random() < 0.2:
            await rec.call(client, "progress page", "GET", "/progress/", expect=(200,))
        await rec.call(client, "home", "GET", "/", expect=(200,))


# ---------------------------------------------------------------- labs in a real browser


def parse_lab(spec: str) -> tuple[str, dict[str, str]]:
    """'kv-vs-no-cache:new_tokens=496,every=2' -> ('kv-vs-no-cache', {...})."""
    slug, _, rest = spec.partition(":")
    params = {}
    for pair in filter(None, rest.split(",")):
        key, sep, value = pair.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--lab {spec!r}: {pair!r} is not name=value")
        params[key.strip()] = value.strip()
    return slug.strip(), params


def _collect(run: LabRunRecord, timing: dict, submitted_ms: float, out: LabResult) -> None:
    """Fold one run page's window.__labDrawn (seq -> [written, received, drawn])."""
    drawn_at = []
    for written, received, drawn in timing.values():
        if drawn is None:
            continue  # arrived, not yet drawn when the page was read
        drawn_at.append(drawn)
        if written is None:
            out.no_write_time += 1
            continue
        out.to_received.append(received - written)
        out.to_drawn.append(drawn - written)
        run.live_points += 1
    if drawn_at:
        run.first_point_s = (min(drawn_at) - submitted_ms) / 1000


async def lab_login(browser, base: str, credentials, rec: Recorder):
    """A browser context logged in through the login form (setup, before the window)."""
    context = await browser.new_context(base_url=base)
    page = await context.new_page()
    page.on("pageerror", lambda exc: rec.error("lab run page (JS error)", str(exc)))
    await page.goto("/accounts/login/")
    await page.get_by_label("Username").fill(credentials[0])
    await page.get_by_label("Password").fill(credentials[1])
    async with page.expect_navigation():
        await page.get_by_role("button", name="Log in").click()
    if "/accounts/login/" in page.url:
        rec.error("lab: log in", f"still on {page.url}: {await page.inner_text('main')}")
    return context, page


async def lab_driver(page, spec, user, deadline, out: LabResult, grace_s: float = 0.0) -> None:
    """Start the lab through its form and watch the run page until the run ends; again and
    again until the window closes. A run still going `grace_s` after that is cancelled."""
    from playwright.async_api import Error as PlaywrightError

    slug, params = spec
    rec = out.rec
    started_runs = len(out.runs)
    try:
        if "/accounts/login/" in page.url:
            return  # not logged in: recorded by lab_login
        while time.monotonic() < deadline - 5:
            form = await page.goto(f"/lab/{slug}/")
            if form is None or form.status != 200:
                rec.error("lab: form", f"GET /lab/{slug}/ -> {form and form.status}")
                return
            for name, value in params.items():
                box = page.locator(f'[name="{name}"]')
                if await box.evaluate("(e) => e.tagName") == "SELECT":
                    await box.select_option(value)
                else:
                    await box.fill(value)
            submitted_ms = time.time() * 1000
            started = time.perf_counter()
            async with page.expect_navigation():
                await page.locator("#start-run").click()
            match = re.search(r"/lab/runs/(\d+)/", page.url)
            if match is None:
                refusal = " ".join((await page.inner_text("main")).split())[:300]
                hint = f" ({RATE_LIMIT_HINT})" if "lab runs in" in refusal else ""
                rec.error("lab: start a run (form)", f"refused{hint}: {refusal}")
                await asyncio.sleep(5)
                continue
            rec.latency["lab: submit -> run page loaded (browser)"].append(
                (time.perf_counter() - started) * 1000
            )
            run = LabRunRecord(user=user, lab=slug, run_id=int(match.group(1)))
            out.runs.append(run)
            await page.wait_for_function("() => window.labRun !== undefined")
            left_ms = (deadline + grace_s - time.monotonic()) * 1000
            try:
                await page.wait_for_function(
                    "() => window.labRun.ended", polling=250, timeout=max(1.0, left_ms)
                )
            except PlaywrightError:  # the window (and the grace) closed first
                run.cut = True
            _collect(run, await page.evaluate("() => window.__labDrawn || {}"), submitted_ms, out)
            run.worker = await page.inner_text("#run-worker")
            if run.cut and await page.locator("#cancel-run").is_visible():
                await page.locator("#cancel-run").click()  # leave the worker idle
                try:
                    await page.wait_for_function(
                        "() => window.labRun.ended", polling=250, timeout=60_000
                    )
                except PlaywrightError:
                    rec.error("lab: cancel at the end", f"run {run.run_id} did not end in 60 s")
            run.status = await page.get_attribute("#run-status", "data-status") or "?"
            run.conditions = (await page.text_content("#run-conditions span") or "").strip()
            if run.status == "failed" or (run.status == "cancelled" and not run.cut):
                error = await page.inner_text("#run-error")
                rec.error("lab: run outcome", f"run {run.run_id} {run.status}: {error}")
        if len(out.runs) == started_runs:
            rec.error("lab: start a run (form)", f"lab user {user} started no {slug} run")
    except PlaywrightError as exc:
        rec.error("lab: browser", f"{slug}: {exc}"[:500])


# ---------------------------------------------------------------- the run


async def run(
    base: str,
    users: int,
    seconds: float,
    think: tuple[float, float] = (2.0, 5.0),
    ramp: float = 10.0,
    labs: tuple[str, ...] = DEFAULT_LABS,
    mock_share: float = 0.15,
    chromium: str = CHROMIUM,
    lab_grace_s: float = 0.0,
) -> Result:
    specs = [parse_lab(s) for s in labs]
    setup, rec, lab = Recorder(), Recorder(), LabResult()
    load_before = os.getloadavg()[0]
    # Idle connections are dropped before uvicorn's keep-alive timeout (5 s) closes them:
    # reusing one the server is closing fails with "Server disconnected" (browsers retry).
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_S)
    clients = [
        httpx.AsyncClient(base_url=base, timeout=60, limits=limits)
        for _ in range(users + len(specs))
    ]
    playwright = browser = None
    contexts = []
    try:
        credentials = await asyncio.gather(
            *(sign_up(c, setup, i * ramp / len(clients)) for i, c in enumerate(clients))
        )
        learners, lab_users = credentials[:users], credentials[users:]
        if specs:
            from playwright.async_api import async_playwright

            playwright = await async_playwright().start()
            browser = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            contexts = await asyncio.gather(
                *(lab_login(browser, base, cred, lab.rec) for cred in lab_users)
            )
        deadline = time.monotonic() + seconds
        await asyncio.gather(
            *(
                learner(c, cred, deadline, rec, think, i * ramp / users, mock_share)
                for i, (c, cred) in enumerate(zip(clients, learners, strict=False))
            ),
            *(
                lab_driver(page, spec, i + 1, deadline, lab, lab_grace_s)
                for i, ((_, page), spec) in enumerate(zip(contexts, specs, strict=True))
            ),
        )
    finally:
        for c in clients:
            await c.aclose()
        for context, _ in contexts:
            await context.close()
        if browser is not None:
            await browser.close()
        if playwright is not None:
            await playwright.stop()
    return Result(setup, rec, lab, seconds, os.cpu_count() or 0, load_before, os.getloadavg()[0])


# ---------------------------------------------------------------- report


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# Page views of practising (docs/BENCHMARKS.md): the GETs that render a practice page. Not
# the submit (it grades: CPU-bound by design), autosaves, logging in, or the mock.
PRACTICE_PAGE_VIEWS = (
    "home",
    "topic page",
    "practice redirect",
    "question page",
    "feedback page",
    "progress page",
)


def practice_views(rec: Recorder) -> list[float]:
    return [ms for kind in PRACTICE_PAGE_VIEWS for ms in rec.latency.get(kind, [])]


def practice_line(rec: Recorder) -> str:
    values = practice_views(rec)
    if not values:
        return "Practice page views: none"
    return (
        f"Practice page views ({', '.join(PRACTICE_PAGE_VIEWS)}): {len(values)}, "
        f"p50 {statistics.median(values):.1f} ms, p95 {pct(values, 0.95):.1f} ms, "
        f"p99 {pct(values, 0.99):.1f} ms"
    )


def table(rec: Recorder) -> None:
    print("| page | requests | errors | p50 ms | p95 ms | p99 ms |")
    print("|---|---|---|---|---|---|")
    labels = set(rec.latency) | set(rec.errors)
    for label in sorted(labels, key=lambda k: (-len(rec.latency.get(k, [])), k)):
        values = rec.latency.get(label, [])
        stats = (
            f"{statistics.median(values):.1f} | {pct(values, 0.95):.1f} | {pct(values, 0.99):.1f}"
            if values
            else "– | – | –"
        )
        print(f"| {label} | {len(values)} | {rec.errors.get(label, 0)} | {stats} |")
    for label, sample in rec.samples.items():
        print(f"first error on {label}: {sample}")


def lab_tables(lab: LabResult) -> None:
    print("| lab SSE latency | points | p50 ms | p95 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|")
    for name, values in (
        ("point written -> SSE message received", lab.to_received),
        ("point written -> drawn on the chart", lab.to_drawn),
    ):
        if values:
            print(
                f"| {name} | {len(values)} | {statistics.median(values):.1f} | "
                f"{pct(values, 0.95):.1f} | {pct(values, 0.99):.1f} | {max(values):.1f} |"
            )
        else:
            print(f"| {name} | 0 | – | – | – | – |")
    if lab.no_write_time:
        print(f"({lab.no_write_time} points replayed from the DB, no write time: left out)")
    print(
        "\n| lab user | lab | run | outcome | live points | submit -> first point s | worker "
        "| nice | CPU share % |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in lab.runs:
        outcome = f"{r.status} (cancelled at the window's end)" if r.cut else r.status
        first = f"{r.first_point_s:.2f}" if r.first_point_s is not None else "–"
        nice = r.nice if r.nice is not None else "–"
        share = f"{r.cpu_share:.0f}" if r.cpu_share is not None else "–"
        print(
            f"| {r.user} | {r.lab} | #{r.run_id} | {outcome} | {r.live_points} | {first} | "
            f"{r.worker} | {nice} | {share} |"
        )
    if lab.runs:
        print("Conditions of the last run (its page): " + (lab.runs[-1].conditions or "–"))
    if any((r.first_point_s or 0) > 10 for r in lab.runs):
        print(
            "A run waited over 10 s for its first point: queued behind the other run (one lab "
            "worker process: start run_all with --concurrency 2) or a slow worker."
        )
    table(lab.rec)


def report(result: Result, args: argparse.Namespace) -> int:
    """Print the tables; returns the number of errors."""
    rec = result.rec
    total = sum(len(v) for v in rec.latency.values())
    errors = result.error_count
    n_setup = args.users + len(args.lab)
    print(f"Setup: {n_setup} accounts signed up over {args.ramp:.0f} s")
    table(result.setup)
    print(
        f"\n{args.users} learners for {args.seconds:.0f} s (arriving over {args.ramp:.0f} s, "
        f"think {args.think_min}-{args.think_max} s, mock step {args.mock_share:.0%} of "
        f"actions) against {args.base_url}: {total} requests ({total / args.seconds:.1f}/s), "
        f"{sum(rec.errors.values())} errors"
    )
    table(rec)
    print(practice_line(rec))
    if args.lab:
        print(f"\n{len(args.lab)} lab users in headless Chromium: {', '.join(args.lab)}")
        lab_tables(result.lab)
    print(
        f"\nMachine: {result.cpus} CPUs; load average {result.load_before:.1f} before, "
        f"{result.load_after:.1f} after (1 min). Errors: {errors}."
    )
    return errors


# ---------------------------------------------------------------- serving it ourselves


@contextlib.contextmanager
def served(port: int, nice: int | None, log_path: str, timeout_s: float = 600.0):
    """`python -m manage run_all --port <port> --concurrency 2` (two lab runs at once), rate
    limits per address and lab runs off (every simulated learner is 127.0.0.1), a fresh
    VAR_DIR (own SQLite database and embedded Redis) and LAB_WORKER_NICE=<nice>; yields its
    URL once /healthz is up and a worker consumes lab-cpu, then stops it (SIGINT: run_all
    stops web, workers and Redis)."""
    var_dir = tempfile.mkdtemp(prefix="bench-web-")
    env = {
        **os.environ,
        "VAR_DIR": var_dir,
        "RATELIMIT_SIGNUP_IP": "off",
        "RATELIMIT_LOGIN_IP": "off",
        "RATELIMIT_LAB_RUN": "off",
    }
    if nice is not None:
        env["LAB_WORKER_NICE"] = str(nice)
    # Plain /healthz is up/down only; the worker list needs the token (or staff).
    token = env.setdefault("HEALTHZ_TOKEN", secrets.token_urlsafe(24))
    argv = [sys.executable, "-m", "manage", "run_all", "--port", str(port), "--concurrency", "2"]
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if server.poll() is not None:
                raise SystemExit(f"run_all exited with {server.returncode}: see {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"run_all not ready after {timeout_s:.0f} s: see {log_path}")
            try:
                health = httpx.get(f"{url}/healthz", headers={"X-Healthz-Token": token}, timeout=5)
                if health.status_code == 200 and "lab-cpu" in health.text:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        yield url
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        shutil.rmtree(var_dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sitting(args: argparse.Namespace, base: str) -> Result:
    return asyncio.run(
        run(
            base.rstrip("/"),
            args.users,
            args.seconds,
            (args.think_min, args.think_max),
            args.ramp,
            tuple(args.lab),
            args.mock_share,
            args.chromium,
        )
    )


def comparison(rows: list[tuple[str, Result]]) -> None:
    """One line per LAB_WORKER_NICE: the practice page views beside what the labs got."""
    print(
        "\n| LAB_WORKER_NICE | practice page views | p50 ms | p95 ms | p99 ms "
        "| submit + grading p95 ms | lab runs | lab CPU share % (mean) | written -> drawn p95 ms "
        "| load avg after | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for nice, result in rows:
        views = practice_views(result.rec)
        grading = result.rec.latency.get("submit + rubric grading", [])
        shares = [r.cpu_share for r in result.lab.runs if r.cpu_share is not None]
        cells = [
            str(nice),
            str(len(views)),
            *(
                (
                    f"{statistics.median(views):.1f}",
                    f"{pct(views, 0.95):.1f}",
                    f"{pct(views, 0.99):.1f}",
                )
                if views
                else ("–",) * 3
            ),
            f"{pct(grading, 0.95):.1f}" if grading else "–",
            str(len(result.lab.runs)),
            f"{statistics.mean(shares):.0f}" if shares else "–",
            f"{pct(result.lab.to_drawn, 0.95):.1f}" if result.lab.to_drawn else "–",
            f"{result.load_after:.1f}",
            str(result.error_count),
        ]
        print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    # SIGTERM unwinds like Ctrl-C, so a server started with --serve is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    parser = argparse.ArgumentParser(
        prog="python -m bench.web",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--ramp", type=float, default=10, help="seconds over which learners arrive")
    parser.add_argument("--think-min", type=float, default=2.0)
    parser.add_argument("--think-max", type=float, default=5.0)
    parser.add_argument(
        "--mock-share", type=float, default=0.15, help="share of actions that are a mock step"
    )
    parser.add_argument(
        "--lab",
        action="append",
        metavar="SLUG[:name=value,...]",
        help=f"a lab user running this lab over and over (repeat; default: {DEFAULT_LABS})",
    )
    parser.add_argument("--no-lab", action="store_true", help="learners only, no browser")
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument(
        "--serve",
        action="store_true",
        help="start the server itself (run_all --concurrency 2, fresh VAR_DIR, per-address "
        "limits off) on a free port, and stop it afterwards; --base-url is ignored",
    )
    parser.add_argument(
        "--compare-nice",
        metavar="N,M,...",
        help="implies --serve: one sitting per LAB_WORKER_NICE value (e.g. 0,10), each on a "
        "fresh server, then a side-by-side table of practice page views",
    )
    args = parser.parse_args(argv)
    args.lab = [] if args.no_lab else (args.lab or list(DEFAULT_LABS))
    for spec in args.lab:
        parse_lab(spec)
    nices: list[int | None] = [None]
    if args.compare_nice:
        try:
            nices = [int(n) for n in args.compare_nice.split(",")]
        except ValueError:
            parser.error(f"--compare-nice {args.compare_nice!r}: integers, e.g. 0,10")
    if not (args.serve or args.compare_nice):
        if report(sitting(args, args.base_url), args):
            raise SystemExit(1)
        return
    rows, errors = [], 0
    for nice in nices:
        label = "default" if nice is None else str(nice)
        log_path = os.path.join(tempfile.gettempdir(), f"bench-web-server-nice-{label}.log")
        print(f"\n## LAB_WORKER_NICE={label} (server log: {log_path})\n", flush=True)
        with served(free_port(), nice, log_path) as base:
            args.base_url = base
            result = sitting(args, base)
        errors += report(result, args)
        rows.append((label, result))
    if len(rows) > 1:
        comparison(rows)
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
