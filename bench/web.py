"""Web load: simulated learners against a running server (`make run`).

    python -m bench.web [--base-url http://127.0.0.1:8000] [--users 50] [--seconds 60]

Each learner signs up (its own account), then loops until time is up: home page, a topic
page, a question (the practice redirect and the attempt page), an autosave of a draft, and
a submitted answer (scenario: rubric-graded; arithmetic: one step checked), sometimes the
progress page, with a think time between actions (default 2-5 s; people reading a question take far longer).
Latency per page kind is client-measured (request sent -> full response read).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import time
import uuid
from collections import defaultdict

import httpx

ANSWER = (
    "Per token the cache is 2 x layers x KV heads x head_dim x bytes, so for Llama-3-70B in "
    "BF16 that is 2 x 80 x 8 x 128 x 2 = 327,680 B. Decode is bound by memory bandwidth, so "
    "we batch to amortise the weight reads, and we page the KV cache to avoid fragmentation."
)
SLUG_RE = re.compile(r'href="/practice/([a-z0-9.-]+)/"')
TOPIC_RE = re.compile(r'href="/topics/([a-z0-9.-]+)/"')
STEP_RE = re.compile(r'hx-post="(/attempts/\d+/steps/[^/"]+/)"')


class Recorder:
    def __init__(self) -> None:
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.samples: dict[str, str] = {}

    async def call(self, client: httpx.AsyncClient, label: str, method: str, url: str, **kw):
        started = time.perf_counter()
        try:
            response = await client.request(method, url, **kw)
            await response.aread()
        except httpx.HTTPError as exc:
            self.errors[label] += 1
            self.samples.setdefault(label, repr(exc))
            return None
        self.latency[label].append((time.perf_counter() - started) * 1000)
        if response.status_code >= 400:
            self.errors[label] += 1
            self.samples.setdefault(label, f"HTTP {response.status_code}")
        return response


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
        data={"username": name, "password1": password, "password2": password},
        headers=csrf(client),
    )
    client.cookies.clear()
    return name, password


async def learner(client, credentials, deadline, rec, think, delay) -> None:
    await asyncio.sleep(delay)  # ramp-up: learners arrive over the first seconds
    await rec.call(client, "login page", "GET", "/accounts/login/")
    name, password = credentials
    await rec.call(
        client,
        "log in (PBKDF2 check)",
        "POST",
        "/accounts/login/",
        data={"username": name, "password": password},
        headers=csrf(client),
    )
    home = await rec.call(client, "home", "GET", "/")
    topics = TOPIC_RE.findall(home.text) if home is not None else []
    while time.monotonic() < deadline and topics:
        await asyncio.sleep(random.uniform(*think))
        topic = await rec.call(client, "topic page", "GET", f"/topics/{random.choice(topics)}/")
        slugs = SLUG_RE.findall(topic.text) if topic is not None else []
        if not slugs:
            continue
        await asyncio.sleep(random.uniform(*think))
        redirect = await rec.call(
            client, "practice redirect", "GET", f"/practice/{random.choice(slugs)}/"
        )
        if redirect is None or "location" not in redirect.headers:
            continue
        attempt_url = redirect.headers["location"]
        page = await rec.call(client, "question page", "GET", attempt_url)
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
                data={"answer": "320 KiB"},
                headers=csrf(client) | {"HX-Request": "true"},
            )
        elif 'name="answer"' in page.text:
            await rec.call(
                client,
                "autosave",
                "POST",
                f"{attempt_url}draft/",
                data={"answer": ANSWER[:120]},
                headers=csrf(client) | {"HX-Request": "true"},
            )
            await asyncio.sleep(random.uniform(*think))
            await rec.call(
                client,
                "submit + rubric grading",
                "POST",
                f"{attempt_url}submit/",
                data={"answer": ANSWER},
                headers=csrf(client),
            )
            await rec.call(client, "feedback page", "GET", attempt_url)
        if random.random() < 0.2:
            await rec.call(client, "progress page", "GET", "/progress/")
        await rec.call(client, "home", "GET", "/")


async def run(base, users, seconds, think, ramp) -> tuple[Recorder, Recorder]:
    setup, rec = Recorder(), Recorder()
    clients = [httpx.AsyncClient(base_url=base, timeout=60) for _ in range(users)]
    try:
        credentials = await asyncio.gather(
            *(sign_up(c, setup, i * ramp / users) for i, c in enumerate(clients))
        )
        deadline = time.monotonic() + seconds
        await asyncio.gather(
            *(
                learner(c, cred, deadline, rec, think, i * ramp / users)
                for i, (c, cred) in enumerate(zip(clients, credentials, strict=True))
            )
        )
    finally:
        for c in clients:
            await c.aclose()
    return setup, rec


def table(rec: Recorder) -> None:
    print("| page | requests | p50 ms | p95 ms | p99 ms | errors |")
    print("|---|---|---|---|---|---|")
    for label, values in sorted(rec.latency.items(), key=lambda kv: -len(kv[1])):
        print(
            f"| {label} | {len(values)} | {statistics.median(values):.1f} | {pct(values, 0.95):.1f} "
            f"| {pct(values, 0.99):.1f} | {rec.errors.get(label, 0)} |"
        )
    for label, sample in rec.samples.items():
        print(f"first error on {label}: {sample}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ramp", type=float, default=10, help="seconds over which learners arrive")
    parser.add_argument("--think-min", type=float, default=2.0)
    parser.add_argument("--think-max", type=float, default=5.0)
    args = parser.parse_args(argv)
    setup, rec = asyncio.run(
        run(args.base_url, args.users, args.seconds, (args.think_min, args.think_max), args.ramp)
    )
    total = sum(len(v) for v in rec.latency.values())
    print(f"Setup: {args.users} learners signed up over {args.ramp:.0f} s")
    table(setup)
    print(
        f"\n{args.users} learners for {args.seconds:.0f} s (arriving over {args.ramp:.0f} s, "
        f"think {args.think_min}-{args.think_max} s) against {args.base_url}: {total} requests "
        f"({total / args.seconds:.1f}/s), {sum(rec.errors.values())} errors"
    )
    table(rec)


if __name__ == "__main__":
    main()
