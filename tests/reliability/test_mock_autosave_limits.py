"""Security probe, issue 16: what one hostile learner can put into Redis through the mock
autosave, and what a mock step draft accepts.

Finding 1 (High): the autosave published the raw POST body (2 MB accepted) to the stream
`mock:<id>:live` (2,000 entries kept) and Redis had no `maxmemory`: ~4 GB per mock. Now a
body over 256 KiB or a box over its length is a 413 that says the limit, a stream entry is
a notice of a few dozen bytes (the interviewer's stream reads the text from the DB), notices
are coalesced to one per box per second without the interviewer ever missing the last text,
more than 10 saves a second get a 429 with Retry-After, and the embedded Redis runs with
`maxmemory` + `noeviction`, where a full Redis does not fail a save.

Finding 8: a step draft took any keys (1.8 MB of JSON re-sent to every interviewer stream).
Now only the question's step names (400 naming the key), each ≤ 200 characters (413).

Real parts: the session's Redis (and a private one with a tiny maxmemory), uvicorn with the
interviewer's SSE stream, Django's test client for the learner, Chromium for autosave.js.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.management import call_command
from django.db import connections
from django.test import Client, RequestFactory
from django_ratelimit.core import get_usage
from playwright.sync_api import Browser, expect

from common import ratelimits
from mock import live
from mock import services as mock_services
from mock.interviewer_views import snapshot
from mock.models import MockItem
from mock.views import DRAFT_MAX_BODY_BYTES
from questions.models import Loop, LoopItem, Question, Step
from trainer import redis_server
from trainer import services as practice
from trainer.models import Attempt

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "decode-is-memory-bound"
SCENARIO = "inference-basics-request-lifecycle"
ARITHMETIC = "inference-basics-two-phase-timing"
WIDE = "😀"  # one character, 4 bytes of UTF-8, 12 URL-encoded, a 12-byte JSON escape

pytestmark = pytest.mark.django_db(transaction=True)  # publishes run on commit, as in prod


@pytest.fixture
def world(settings, redis_url):
    """ada (the learner) in two mocks, a scenario one and an arithmetic one, each watched
    by bob; every rate limit off unless a test turns one on; no stream left from an
    earlier test under the same (reused) mock ids."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.RATELIMITS = dict.fromkeys(settings.RATELIMITS)
    call_command("load_bank", f"{ROOT}/questions/bank/inference-basics.yaml", verbosity=0)
    users = get_user_model().objects
    ada = users.create_user("ada", password=PASSWORD)
    bob = users.create_user("bob", password=PASSWORD)
    mocks = {}
    for kind, slug in (("scenario", SCENARIO), ("arithmetic", ARITHMETIC)):
        loop = Loop.objects.create(slug=f"probe-{kind}", title=f"Probe {kind}")
        LoopItem.objects.create(loop=loop, question=Question.objects.get(slug=slug), minutes=10)
        mock = mock_services.mock_start(user=ada, loop=loop)
        invite = mock_services.invite_create(mock=mock, user=ada)
        mock_services.invite_accept(token=invite.token, user=bob)
        mocks[kind] = mock
    r = redis.Redis.from_url(redis_url)
    for mock in mocks.values():
        for k in r.scan_iter(f"mock:{mock.pk}:*"):
            r.delete(k)
    client = Client()
    client.force_login(ada)
    return {"ada": ada, "bob": bob, "client": client, "redis": r, **mocks}


def mock_bytes(r: redis.Redis, mock_id: int) -> int:
    """Redis memory held by one mock's keys (MEMORY USAGE, all samples)."""
    return sum(r.memory_usage(k, samples=0) or 0 for k in r.scan_iter(f"mock:{mock_id}:*"))


def largest_entry(r: redis.Redis, mock_id: int) -> int:
    entries = r.xrange(live.key(mock_id))
    return max((sum(len(k) + len(v) for k, v in f.items()) for _, f in entries), default=0)


def answer_entries(r: redis.Redis, mock_id: int) -> list[tuple[bytes, dict]]:
    return [(i, f) for i, f in r.xrange(live.key(mock_id)) if f[b"kind"] == b"answer"]


def draft_url(mock, order: int = 0) -> str:
    return f"/mock/{mock.pk}/items/{order}/draft/"


# --- finding 1: size ---------------------------------------------------------------------


def test_a_hostile_autosave_is_refused_with_the_limit_and_the_stream_stays_small(world):
    client, r, mock = world["client"], world["redis"], world["scenario"]
    attempt = MockItem.objects.get(mock=mock, order=0).attempt
    assert client.post(draft_url(mock), {"slot": "main", "answer": "kept"}).status_code == 200

    # A 2 MB body (the probe's): refused before it is read, the limit in the message.
    huge = client.post(draft_url(mock), {"slot": "main", "answer": "x" * 2_000_000})
    html = huge.content.decode()
    assert huge.status_code == 413, html[:200]
    assert f"{DRAFT_MAX_BODY_BYTES:,} bytes" in html and "20,000 characters" in html
    # Just over the box's length (a small body): 413 naming the box's limit.
    over = client.post(draft_url(mock), {"slot": "main", "answer": "x" * 20_001})
    assert over.status_code == 413 and "at most 20,000" in over.content.decode()
    over_fu = client.post(draft_url(mock), {"slot": "fu-0", "answer": "y" * 20_001})
    assert over_fu.status_code == 413
    attempt.refresh_from_db()
    assert attempt.draft == "kept"  # a refused save changes nothing

    # One learner saving the longest box the page allows, in the widest characters, as
    # fast as the server answers (rate limit off: this measures the stream alone).
    started = time.monotonic()
    for i in range(40):
        text = f"{i:02d}" + WIDE * 19_998
        saved = client.post(draft_url(mock), {"slot": "main", "answer": text})
        assert saved.status_code == 200
    elapsed = time.monotonic() - started
    attempt.refresh_from_db()
    assert attempt.draft == text  # the draft itself is stored whole
    entries = answer_entries(r, mock.pk)
    entry, used = largest_entry(r, mock.pk), mock_bytes(r, mock.pk)
    print(
        f"40 saves of 20,000 wide chars in {elapsed:.1f} s: {len(entries)} stream entries, "
        f"largest {entry} B, mock keys {used:,} B; at MAXLEN {live.MAXLEN}: "
        f"~{entry * live.MAXLEN / 1e3:.0f} kB"
    )
    assert 1 <= len(entries) <= elapsed + 2  # coalesced: ≤ 1 notice per box per second
    assert entry <= 128  # a notice, not the text (was 2,000,073 B for the probe's body)
    assert used <= 16 * 1024  # was 2.0 MB after one hostile save, 6.0 MB after these 40


# --- finding 1: coalescing never loses the last text ---------------------------------------


def read_events(stream, events: list, stop: threading.Event) -> None:
    kind = None
    try:
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
            if stop.is_set():
                return
    except Exception:  # the test closed the response: done
        return


def log_in_http(http: httpx.Client, name: str) -> None:
    token = http.get("/accounts/login/").cookies["csrftoken"]
    login = http.post(
        "/accounts/login/",
        data={"username": name, "password": PASSWORD, "csrfmiddlewaretoken": token},
    )
    assert login.status_code in (200, 302)


def main_texts(events: list) -> list[str]:
    return [d["text"] for k, d in events if k == "answer" and d["slot"] == "main"]


def wait_shown(events: list, text: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = main_texts(events)
        if shown and shown[-1] == text:
            return True
        time.sleep(0.02)
    return False


def test_a_coalesced_save_still_reaches_the_interviewer(world, asgi_server):
    """A save with a notice; the interviewer shows it; the next save, less than a second
    later, gets no notice of its own (coalesced) and must still reach the interviewer. (On
    a slow machine the next save may get its own notice: then it is shown and the pair is
    tried again.) The old code published every save: none is coalesced, this fails."""
    client, r, mock = world["client"], world["redis"], world["scenario"]
    client.post(draft_url(mock), {"slot": "main", "answer": "first words"})
    events: list = []
    stop = threading.Event()
    with httpx.Client(base_url=asgi_server, timeout=httpx.Timeout(10, read=30)) as http:
        log_in_http(http, "bob")
        with http.stream("GET", f"/mock/{mock.pk}/interviewer/events") as stream:
            reader = threading.Thread(target=read_events, args=(stream, events, stop), daemon=True)
            reader.start()
            assert wait_shown(events, "first words", 20)
            time.sleep(live.COALESCE_MS / 1000 + 0.5)  # the first save's gate is down again
            before = len(answer_entries(r, mock.pk))
            started, coalesced, text = time.monotonic(), False, ""
            for i in range(40):
                now = r.time()  # Redis's clock: the stream ids are in it
                sent_ms = now[0] * 1000 + now[1] // 1000
                text = f"draft {i}: " + "decode reads every weight " * (i % 7)
                saved = client.post(draft_url(mock), {"slot": "main", "answer": text})
                assert saved.status_code == 200
                newest = answer_entries(r, mock.pk)[-1][0]
                if int(newest.split(b"-")[0]) < sent_ms:  # no notice since this save began
                    coalesced = True
                    break
                # It had its notice: wait until the interviewer shows it, then save again.
                assert wait_shown(events, text, 20), f"save {i} never reached the interviewer"
            elapsed = time.monotonic() - started
            notices = len(answer_entries(r, mock.pk)) - before
            assert coalesced, f"{i + 1} saves, each got its own stream entry"
            arrived = wait_shown(events, text, 30)
            stop.set()
    reader.join(5)
    shown = main_texts(events)
    print(f"{i + 1} saves in {elapsed:.1f} s → {notices} notices; interviewer got {len(shown)}")
    assert shown[0] == "first words"
    assert arrived and shown[-1] == text  # the coalesced last save arrived (from the DB)
    assert 1 <= notices <= elapsed + 2 and i >= 1


# --- finding 1: more than 10 saves a second ----------------------------------------------------


def fresh_window(user, need_s: int) -> None:
    request = RequestFactory().post("/")
    request.user = user or AnonymousUser()
    from django.conf import settings

    rate = settings.RATELIMITS["autosave"]
    while True:
        now = int(time.time())
        left = get_usage(request, group="autosave", key=ratelimits.user_id, rate=rate)
        if left["time_left"] >= need_s:
            return
        time.sleep(max(0.0, now + left["time_left"] + 1 - time.time()) + 0.05)


def test_autosave_at_typing_speed_is_never_refused_a_script_gets_429(world, settings):
    from trainer.settings import RATELIMIT_DEFAULTS

    assert RATELIMIT_DEFAULTS["autosave"] == ("RATELIMIT_AUTOSAVE", "10/s")
    client, mock = world["client"], world["scenario"]
    attempt = MockItem.objects.get(mock=mock, order=0).attempt
    settings.RATELIMITS = {**settings.RATELIMITS, "autosave": "10/s"}
    for i in range(8):  # four saves a second (typing saves ≤ 2 per box): never limited
        saved = client.post(draft_url(mock), {"slot": "main", "answer": f"typed {i}"})
        assert saved.status_code == 200, saved.content
        time.sleep(0.25)
    # A script: the 11th save in one window is refused (a 4 s window keeps the burst in one).
    settings.RATELIMITS = {**settings.RATELIMITS, "autosave": "10/4s"}
    fresh_window(world["ada"], need_s=3)
    statuses = [
        client.post(draft_url(mock), {"slot": "main", "answer": f"burst {i}"}) for i in range(12)
    ]
    assert [s.status_code for s in statuses] == [200] * 10 + [429] * 2
    refused = statuses[10]
    message = refused.content.decode()
    assert "more than 10 autosaves in 4 seconds" in message and "still in the box" in message
    assert 1 <= int(refused["Retry-After"]) <= 5
    attempt.refresh_from_db()
    assert attempt.draft == "burst 9"
    time.sleep(int(refused["Retry-After"]) + 0.05)
    again = client.post(draft_url(mock), {"slot": "main", "answer": "burst 11"})
    assert again.status_code == 200
    attempt.refresh_from_db()
    assert attempt.draft == "burst 11"


def orm(fn):
    """An ORM call from a Playwright test body: in a worker thread (Playwright's sync API
    keeps an event loop in the test thread), its connections closed after."""

    def run():
        try:
            return fn()
        finally:
            connections.close_all()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@pytest.mark.browser
def test_autosave_js_keeps_the_text_and_saves_it_after_retry_after(
    world, settings, browser: Browser, asgi_server
):
    settings.RATELIMITS = {**settings.RATELIMITS, "autosave": "1/10s"}
    mock = world["scenario"]
    attempt_id = orm(lambda: MockItem.objects.get(mock=mock, order=0).attempt_id)
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{asgi_server}/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{asgi_server}/mock/{mock.pk}/")
    fresh_window(world["ada"], need_s=6)  # both saves below fall in one window
    box = page.get_by_label("Your answer")
    box.fill("Prefill")
    box.dispatch_event("input")
    expect(page.locator("#autosave-status")).to_contain_text("Saved", timeout=10_000)
    box.fill("Prefill then decode")  # within the same window: refused, kept, retried
    box.dispatch_event("input")
    status = page.locator("#autosave-status")
    expect(status).to_contain_text("more than 1 autosaves", timeout=10_000)
    expect(box).to_have_value("Prefill then decode")
    # No more typing: autosave.js sends it again after Retry-After.
    expect(status).to_contain_text("Saved", timeout=20_000)
    assert page.evaluate("window.autosave.unsaved()") == 0
    context.close()
    draft = orm(lambda: Attempt.objects.get(pk=attempt_id).draft)
    assert draft == "Prefill then decode"


# --- finding 1: Redis memory capped, never evicting, a full Redis does not fail a save ------------


@pytest.fixture
def tiny_redis(settings):
    """The embedded Redis as `make run` starts it, but with a 2 MB cap; the site's Redis
    (streams, rate-limit counters) pointed at it."""
    folder = Path(tempfile.mkdtemp(prefix="r16-", dir="/tmp"))
    sock = folder / "r.sock"
    process = redis_server.start_embedded(sock, maxmemory="2mb")
    url = f"unix://{sock}"
    settings.REDIS_URL = url
    settings.CACHES = {
        **settings.CACHES,
        "ratelimit": {**settings.CACHES["ratelimit"], "LOCATION": url},
    }
    yield redis.Redis.from_url(url)
    redis_server.stop(process, sock)
    shutil.rmtree(folder, ignore_errors=True)


def test_the_embedded_redis_is_capped_and_never_evicts(settings):
    folder = Path(tempfile.mkdtemp(prefix="r16-", dir="/tmp"))
    process = redis_server.start_embedded(folder / "r.sock")
    try:
        r = redis.Redis.from_url(f"unix://{folder / 'r.sock'}")
        assert int(r.config_get("maxmemory")["maxmemory"]) == 512 * 1024 * 1024
        assert settings.REDIS_MAXMEMORY == "512mb"
        assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
    finally:
        redis_server.stop(process, folder / "r.sock")
        shutil.rmtree(folder, ignore_errors=True)


def test_a_full_redis_refuses_the_live_notice_not_the_save(world, settings, tiny_redis):
    r = tiny_redis
    settings.RATELIMITS = {**settings.RATELIMITS, "autosave": "10/s"}
    queued = r.lpush("default", "a queued task message")  # what the broker must keep
    filled = 0
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for filled in range(10_000):
            r.set(f"filler:{filled}", "z" * 10_000)
    assert queued == 1 and r.lrange("default", 0, -1) == [b"a queued task message"]
    client, mock = world["client"], world["scenario"]
    saved = client.post(draft_url(mock), {"slot": "main", "answer": "typed while Redis is full"})
    assert saved.status_code == 200 and "Saved" in saved.content.decode()
    attempt = MockItem.objects.get(mock=mock, order=0).attempt
    assert attempt.draft == "typed while Redis is full"
    assert r.xlen(live.key(mock.pk)) == 0  # the notice was refused (OOM), not the save
    assert snapshot(mock.pk)["texts"][0]["main"] == "typed while Redis is full"
    assert r.lrange("default", 0, -1) == [b"a queued task message"]  # nothing evicted
    print(f"tiny Redis full after {filled} × 10 kB; the save went through, the queue kept")


# --- finding 8: step drafts ---------------------------------------------------------------------


def test_step_drafts_take_only_the_questions_steps_within_their_length(world):
    client, r, mock = world["client"], world["redis"], world["arithmetic"]
    item = MockItem.objects.get(mock=mock, order=0)
    names = list(
        Step.objects.filter(problem__question=item.question).values_list("name", flat=True)
    )
    url = draft_url(mock)
    good = {f"step:{n}": "12 ms" for n in names}
    assert client.post(url, {"slot": "steps", **good}).status_code == 200

    # The probe: arbitrary keys (1.8 MB of JSON).
    hostile = {f"step:k{i:03d}": "v" * 2_000 for i in range(900)}
    probe = client.post(url, {"slot": "steps", **hostile})
    assert probe.status_code == 413, probe.content[:200]
    # Arbitrary keys in a body under the cap: 400 naming the first one.
    small = client.post(url, {"slot": "steps", **dict(list(hostile.items())[:50])})
    assert small.status_code == 400 and "no step &#x27;k000&#x27;" in small.content.decode()
    # One unknown key in a small body: 400 naming it and the real steps.
    unknown = client.post(url, {"slot": "steps", **good, "step:evil": "1"})
    message = unknown.content.decode()
    assert unknown.status_code == 400, message
    assert "no step &#x27;evil&#x27;" in message and all(n in message for n in names)
    # A known step, longer than its box: 413 naming the limit.
    long = client.post(url, {"slot": "steps", f"step:{names[0]}": "9" * 201})
    assert long.status_code == 413 and "at most 200" in long.content.decode()
    # Steps on a written question: 400.
    written = client.post(draft_url(world["scenario"]), {"slot": "steps", "step:x": "1"})
    assert written.status_code == 400
    item.refresh_from_db()
    assert item.step_drafts == {n: "12 ms" for n in names}  # refusals changed nothing

    # The same keys through submit and "next": refused before anything is graded or closed.
    steps_post = client.post(f"/mock/{mock.pk}/items/0/steps/", {"step:evil": "1" * 5_000})
    assert steps_post.status_code == 302
    next_post = client.post(f"/mock/{mock.pk}/items/0/next/", {"step:evil": "1"})
    assert next_post.status_code == 302
    item.refresh_from_db()
    assert item.closed is None and not item.attempt.step_answers.exists()
    assert item.step_drafts == {n: "12 ms" for n in names}
    assert largest_entry(r, mock.pk) <= 128
    state = snapshot(mock.pk)["texts"][0]["steps"]
    assert "evil" not in state and len(state) < 1_000
    print(f"steps: largest stream entry {largest_entry(r, mock.pk)} B, snapshot {len(state)} chars")


def test_the_limits_match_the_boxes():
    """The limits the service enforces are the ones the page's boxes carry (test_input_limits
    checks the templates against these constants)."""
    assert practice.ANSWER_MAX_CHARS == 20_000 and mock_services.STEP_DRAFT_MAX_CHARS == 200
    # The worst legitimate body (the longest answer, every character 12 bytes encoded) fits.
    assert practice.ANSWER_MAX_CHARS * 12 + 1_000 < DRAFT_MAX_BODY_BYTES
