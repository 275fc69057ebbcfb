"""The OpenAI-compatible server (`python -m lab.engine.server`), run as a real child process
and driven with the official `openai` client and raw httpx."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from lab.engine.server.launch import read_metrics, spawn
from lab.engine.server.text import Detokenizer, StopChecker
from lab.engine.server.timing import HOPS
from lab.labs.common import tokenizer
from lab.loadgen.runner import run_blocking

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def url():
    with spawn() as base:
        yield base


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url, api_key="x", max_retries=0)


metrics = read_metrics


def wait_for(url: str, predicate, timeout: float = 20) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = metrics(url)
        if predicate(m):
            return m
        time.sleep(0.05)
    raise AssertionError(f"metrics never matched: {metrics(url)}")


def server_timing(header: str) -> dict[str, float]:
    hops = {}
    for part in header.split(","):
        name, dur = part.strip().split(";dur=")
        hops[name] = float(dur)
    return hops


def test_models_and_health(client, url):
    models = client.models.list().data
    assert [m.id for m in models] == ["target"]
    assert httpx.get(url.removesuffix("/v1") + "/health").json() == {"status": "ok"}


def test_completion_and_stream_agree(client):
    args = dict(
        model="target",
        prompt="def fib(n):",
        max_tokens=24,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    whole = client.completions.create(**args)
    assert whole.object == "text_completion"
    assert whole.usage.prompt_tokens == len(tokenizer().encode("def fib(n):").ids)
    assert whole.usage.completion_tokens == 24
    assert whole.choices[0].finish_reason == "length"
    assert whole.choices[0].text

    chunks = list(
        client.completions.create(**args, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text  # greedy: same tokens streamed or not
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_chat_completion_streamed_and_not(client):
    messages = [{"role": "system", "content": "Python."}, {"role": "user", "content": "import"}]
    whole = client.chat.completions.create(
        model="target", messages=messages, max_tokens=12, temperature=0
    )
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.prompt_tokens == len(tokenizer().encode("Python.\nimport").ids)
    chunks = list(
        client.chat.completions.create(
            model="target", messages=messages, max_tokens=12, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_seeded_sampling_repeats_and_token_prompts_work(client):
    ids = tokenizer().encode("class Foo:").ids
    runs = [
        client.completions.create(
            model="target", prompt=ids, max_tokens=16, seed=7, temperature=0.9
        )
        .choices[0]
        .text
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


def test_stop_string_ends_the_text(client):
    out = client.completions.create(
        model="target",
        prompt="import os\nimport",
        max_tokens=64,
        temperature=0,
        stop=["\n"],
        extra_body={"ignore_eos": True},
    )
    choice = out.choices[0]
    assert "\n" not in choice.text and choice.finish_reason == "stop"
    streamed = client.completions.create(
        model="target",
        prompt="import os\nimport",
        max_tokens=64,
        temperature=0,
        stop=["\n"],
        extra_body={"ignore_eos": True},
        stream=True,
    )
    assert "".join(c.choices[0].text for c in streamed) == choice.text


def test_server_timing_hops_add_up(url):
    r = httpx.post(
        f"{url}/completions",
        json={"model": "target", "prompt": "x = 1", "max_tokens": 8, "ignore_eos": True},
    )
    hops = server_timing(r.headers["server-timing"])
    assert set(hops) == {*HOPS, "detokenize", "total"}
    assert all(v >= 0 for v in hops.values())
    assert sum(hops[h] for h in HOPS) == pytest.approx(hops["total"], abs=0.05)
    assert hops["decode"] > 0 and hops["prefill"] > 0

    body = {
        "model": "target",
        "prompt": "x = 1",
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream("POST", f"{url}/completions", json=body) as r:
        assert "tokenize;dur=" in r.headers["server-timing"]
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    final = json.loads(events[-2])
    assert final["usage"]["completion_tokens"] >= 1
    timing = final["server_timing"]
    assert sum(timing[h] for h in HOPS) == pytest.approx(timing["total"], abs=0.05)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"prompt": "a"}, 400, "model"),
        ({"model": "target"}, 400, "prompt"),
        ({"model": "nope", "prompt": "a"}, 404, "model"),
        ({"model": "target", "prompt": ""}, 400, "prompt"),
        ({"model": "target", "prompt": "a", "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "target", "prompt": "a", "max_tokens": 600}, 400, "max_tokens"),
        ({"model": "target", "prompt": "a", "temperature": -1}, 400, "temperature"),
        ({"model": "target", "prompt": "a", "top_p": 0}, 400, "top_p"),
        ({"model": "target", "prompt": "a", "n": 3}, 400, "n"),
        ({"model": "target", "prompt": "a", "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ({"model": "target", "prompt": "a", "logprobs": 3}, 400, "logprobs"),
        ({"model": "target", "prompt": [999999]}, 400, "prompt"),
        ({"model": "target", "prompt": ["a", "b"]}, 400, "prompt"),
        ({"model": "target", "prompt": "a", "stream": "maybe"}, 400, "stream"),
    ],
)
def test_bad_requests_get_openai_errors(url, body, status, param):
    r = httpx.post(f"{url}/completions", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_bad_bodies_and_routes(url, client):
    assert httpx.post(f"{url}/completions", content=b"{nope").status_code == 400
    assert httpx.post(f"{url}/completions", json=[1, 2]).status_code == 400
    r = httpx.post(f"{url}/chat/completions", json={"model": "target", "messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = httpx.get(f"{url}/nope")
    assert r.status_code == 404 and r.json()["error"]["message"] == "No route /v1/nope."
    assert httpx.get(f"{url}/completions").status_code == 405
    with pytest.raises(openai.BadRequestError, match="maximum context length is 512"):
        client.completions.create(model="target", prompt="a", max_tokens=5000)


def _read_then_leave(url: str, chunks: int) -> None:
    body = {
        "model": "target",
        "prompt": "def f(x):",
        "max_tokens": 400,
        "ignore_eos": True,
        "stream": True,
    }
    with httpx.stream("POST", f"{url}/completions", json=body, timeout=30) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("data:")
            if seen >= chunks:
                return


def test_disconnect_aborts_within_a_step_and_frees_blocks(url):
    before = metrics(url)
    _read_then_leave(url, chunks=3)
    m = wait_for(
        url, lambda m: m.get("aborted_requests_total", 0) > before.get("aborted_requests_total", 0)
    )
    late = m["tokens_after_disconnect_total"] - before.get("tokens_after_disconnect_total", 0)
    assert late <= 1  # only the step that was already running when the client left
    assert m["kv_blocks_allocated"] == 0 and m["kv_blocks_free"] == m["kv_blocks_total"]
    assert m["in_flight_requests"] == 0
    generated = m["generated_tokens_total"] - before["generated_tokens_total"]
    assert generated < 20  # far from the 400 asked for


def test_without_abort_the_engine_decodes_for_nobody():
    with spawn("--no-abort-on-disconnect") as url:
        _read_then_leave(url, chunks=3)
        m = wait_for(url, lambda m: m.get("finished_length_total", 0) == 1, timeout=60)
        assert m.get("aborted_requests_total", 0) == 0 and m["disconnects_total"] == 1
        assert m["tokens_after_disconnect_total"] >= 390
        assert m["kv_blocks_allocated"] == 0


def test_over_capacity_gets_429_not_a_pile_up():
    with spawn("--max-num-seqs", "1", "--max-queue", "1", "--api-key", "sesame") as url:
        assert (
            httpx.post(f"{url}/completions", json={"model": "target", "prompt": "a"}).status_code
            == 401
        )
        headers = {"Authorization": "Bearer sesame"}
        # Every /v1 route wants the key, the model list included (as OpenAI and vLLM).
        for path in ("/models", "/models/target"):
            refused = httpx.get(f"{url}{path}", headers={"Authorization": "Bearer sesam"})
            assert (
                refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
            )
            assert httpx.get(f"{url}{path}", headers=headers).status_code == 200
        body = {"model": "target", "prompt": "a", "max_tokens": 40, "ignore_eos": True}

        async def burst():
            async with httpx.AsyncClient(timeout=60, headers=headers) as c:
                return await asyncio.gather(
                    *[c.post(f"{url}/completions", json=body) for _ in range(5)]
                )

        responses = run_blocking(burst())
        codes = sorted(r.status_code for r in responses)
        assert codes == [200, 200, 429, 429, 429]
        busy = next(r for r in responses if r.status_code == 429)
        assert busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "server_busy"
        m = metrics(url)
        assert m["rejected_requests_total"] == 3 and m["in_flight_requests"] == 0


def test_stop_checker_holds_back_a_possible_stop_start():
    stops = StopChecker(["END"])
    assert stops.feed("abcE") == "ab"  # holds back len("END") - 1 characters
    assert stops.feed("N") == "c"
    assert stops.feed("Dxyz") == "" and stops.stopped
    assert stops.text == "abc"
    free = StopChecker([])
    assert free.feed("a\n") == "a\n" and free.feed("", final=True) == ""


def test_detokenizer_never_splits_a_character():
    tok = tokenizer()
    text = "naïve café → π ≈ 3.14159 ✓"
    ids = tok.encode(text).ids
    detok = Detokenizer(tok)
    pieces = [detok.add([i]) for i in ids]
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_loadgen_against_our_server(url, tmp_path):
    """`python -m lab.loadgen` on loopback for a few seconds: metrics computed, JSON valid,
    and the server's own counters agree with what the client saw."""
    import subprocess
    import sys

    before = metrics(url)
    out = tmp_path / "run.json"
    cmd = [
        sys.executable,
        "-m",
        "lab.loadgen",
        "--url",
        url,
        "--rate",
        "8",
        "--duration",
        "3",
        "--num-requests",
        "1000",
        "--input-len",
        "32",
        "--output-len",
        "16",
        "--ignore-eos",
        "--slo",
        "ttft_ms=2000,tpot_ms=500",
        "--out",
        str(out),
        "--no-progress",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    s = result["summary"]
    assert s["completed"] == s["requests"] >= 10 and s["failed"] == 0
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms"):
        stats = s[name]
        assert 0 < stats["median"] <= stats["p90"] <= stats["p99"]
    assert s["total_output_tokens"] == 16 * s["completed"]
    assert s["goodput"] is not None and s["request_throughput"] > 0
    records = result["requests"]
    assert len(records) == s["requests"]
    assert all(r["server_timing"] and r["output_tokens"] == 16 for r in records)
    after = metrics(url)
    assert after["generated_tokens_total"] - before.get("generated_tokens_total", 0) == 16 * len(
        records
    )
