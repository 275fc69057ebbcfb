"""lab.loadgen end to end against a small fake OpenAI-compatible server (uvicorn in a thread).

The fake's behaviour is chosen per request by an extra body field, `"fake": ...`, which the
load generator passes through with `extra_body`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from lab.loadgen import LoadConfig, LoadgenError, run, sweep
from lab.loadgen.__main__ import main


class Fake:
    """State shared with the server thread: request bodies, headers, disconnects."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.disconnects = 0
        self.calls = 0


def sse(obj) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


def make_app(fake: Fake) -> Starlette:
    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{"id": "fake-model"}]})

    async def completions(request: Request):
        body = await request.json()
        fake.bodies.append(body)
        fake.headers.append(dict(request.headers))
        fake.calls += 1
        mode = body.get("fake", "ok")
        chat = request.url.path.endswith("/chat/completions")

        def choice(text):
            return {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}

        if mode == "429":
            return JSONResponse({"error": {"message": "queue full", "type": "rate_limit"}}, 429)
        if mode == "400":
            return JSONResponse({"error": {"message": "max_tokens too big"}}, 400)
        if mode == "flaky" and fake.calls % 2 == 1:
            return JSONResponse({"error": {"message": "try again"}}, 503)

        async def ok():
            usage = {"prompt_tokens": 11}
            if chat:  # role-only first delta, as OpenAI and vLLM send
                yield sse(
                    {
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                        "usage": usage | {"completion_tokens": 0},
                    }
                )
            for i, (text, total) in enumerate([("a", 1), ("bcd", 4), ("e", 5)]):
                await asyncio.sleep(0.02)
                chunk = {
                    "choices": [choice(text) | {"finish_reason": "length" if i == 2 else None}]
                }
                if mode != "nousage":
                    chunk["usage"] = usage | {"completion_tokens": total}
                yield sse(chunk)
            if mode != "nousage":
                yield sse(
                    {
                        "choices": [],
                        "usage": usage | {"completion_tokens": 5},
                        "server_timing": {"queue": 1.0, "total": 60.0},
                    }
                )
            yield b"data: [DONE]\n\n"

        async def slow():
            try:
                for _ in range(200):
                    yield sse({"choices": [choice("x")]})
                    await asyncio.sleep(0.05)
                yield b"data: [DONE]\n\n"
            finally:
                fake.disconnects += 1

        async def broken():
            yield sse({"choices": [choice("x")]})
            yield sse({"error": {"message": "engine died", "type": "internal_error"}})

        stream = {"slow": slow, "broken": broken}.get(mode, ok)
        return StreamingResponse(stream(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", completions, methods=["POST"]),
        ]
    )


@pytest.fixture(scope="module")
def server():
    fake = Fake()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(make_app(fake), log_level="warning", lifespan="off")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline, "fake server did not start"
        time.sleep(0.01)
    yield fake, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture
def fake(server):
    fake, url = server
    fake.__init__()
    return fake, url


def config(url, **kwargs) -> LoadConfig:
    kwargs.setdefault("num_requests", 4)
    kwargs.setdefault("concurrency", 2)
    return LoadConfig(base_url=url, input_len=16, output_len=5, **kwargs)


def test_closed_loop_run(fake):
    fake, url = fake
    seen = []
    result = run(
        config(url, num_requests=6, ignore_eos=True, api_key="sk-test", seed=3), seen.append
    )
    json.dumps(result, allow_nan=False)
    assert len(seen) == 6
    s = result["summary"]
    assert s["completed"] == 6 and s["failed"] == 0 and s["attempts"] == 6
    assert s["total_output_tokens"] == 30 and s["total_input_tokens"] == 66
    assert result["config"]["model"] == "fake-model"  # resolved from /models
    assert result["config"]["api_key"] == "***"
    assert result["duration_s"] > 0

    r = result["requests"][0]
    assert [x["index"] for x in result["requests"]] == list(range(6))
    assert r["success"] and r["attempts"][0]["outcome"] == "ok"
    assert r["prompt_tokens"] == 11  # the server's usage, not the local count
    assert r["chunk_tokens"] == [1, 3, 1]  # usage.completion_tokens deltas
    assert len(r["itl"]) == 4  # per token: 3 for the 3-token chunk, 1 for the last
    assert r["ttft"] == pytest.approx(r["chunk_times"][0])
    assert r["e2e"] >= r["chunk_times"][-1]
    assert r["server_timing"] == {"queue": 1.0, "total": 60.0}
    assert min(x["start"] for x in result["requests"]) == 0.0

    body = fake.bodies[0]
    assert body["model"] == "fake-model" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 5 and body["temperature"] == 0.0
    assert isinstance(body["prompt"], str) and body["prompt"]
    assert fake.headers[0]["authorization"] == "Bearer sk-test"


def test_prompts_are_seeded(fake):
    fake, url = fake
    run(config(url, seed=1, concurrency=1, num_requests=3))
    first = [b["prompt"] for b in fake.bodies]
    fake.bodies.clear()
    run(config(url, seed=1, concurrency=1, num_requests=3))
    assert [b["prompt"] for b in fake.bodies] == first
    assert len(set(first)) == 3


def test_chat_endpoint_skips_the_role_chunk_for_ttft(fake):
    fake, url = fake
    result = run(config(url, endpoint="chat", model="m", num_requests=2))
    r = result["requests"][0]
    assert r["success"]
    assert fake.bodies[0]["messages"][0]["role"] == "user"
    assert fake.bodies[0]["model"] == "m"
    assert r["chunk_tokens"] == [0, 1, 3, 1]
    assert r["ttft"] == pytest.approx(r["chunk_times"][1])  # not the role-only first chunk
    assert r["ttft"] > r["chunk_times"][0]


def test_without_usage_tokens_come_from_the_local_tokenizer(fake):
    fake, url = fake
    r = run(config(url, extra_body={"fake": "nousage"}, num_requests=1))["requests"][0]
    assert r["success"] and r["server_timing"] is None
    assert r["chunk_tokens"][0] == 1 and sum(r["chunk_tokens"]) == r["output_tokens"]
    assert r["prompt_tokens"] > 0  # the local count


def test_timeout_is_a_total_deadline_and_closes_the_connection(fake):
    fake, url = fake
    # the stream never stalls (a chunk every 50 ms), so only a total deadline can end it
    t = time.perf_counter()
    result = run(config(url, extra_body={"fake": "slow"}, timeout_s=0.3, num_requests=2))
    assert time.perf_counter() - t < 3
    for r in result["requests"]:
        assert not r["success"]
        (attempt,) = r["attempts"]
        assert attempt["outcome"] == "timeout"
        assert attempt["end"] - attempt["start"] == pytest.approx(0.3, abs=0.1)
    deadline = time.monotonic() + 3
    while fake.disconnects < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fake.disconnects == 2  # the server saw both clients go away
    assert result["summary"]["outcomes"] == {"timeout": 2}


def test_errors_carry_the_server_message_and_4xx_is_not_retried(fake):
    fake, url = fake
    result = run(config(url, extra_body={"fake": "400"}, retry="immediate", num_requests=2))
    for r in result["requests"]:
        assert [a["outcome"] for a in r["attempts"]] == ["http 400: max_tokens too big"]
        assert r["error"] == "http 400: max_tokens too big (not retryable)"


def test_429_is_retried_up_to_max_retries(fake):
    fake, url = fake
    result = run(config(url, extra_body={"fake": "429"}, retry="immediate", max_retries=2))
    s = result["summary"]
    assert s["failed"] == 4 and s["attempts"] == 12 and s["attempts_per_request"] == 3
    assert s["outcomes"] == {"http 429": 12}
    assert s["offered_load"] == pytest.approx(3 * s["requests"] / s["duration_s"])
    assert result["requests"][0]["error"] == "http 429: queue full (max retries)"


def test_backoff_recovers_from_a_5xx(fake):
    fake, url = fake
    result = run(
        config(url, extra_body={"fake": "flaky"}, retry="backoff", backoff_base=0.01, concurrency=1)
    )
    for r in result["requests"]:
        assert r["success"]
        assert [a["outcome"] for a in r["attempts"]] == ["http 503: try again", "ok"]
        assert r["start"] == r["attempts"][0]["start"]
    s = result["summary"]
    assert s["useful_load"] == pytest.approx(s["offered_load"] / 2)


def test_an_error_inside_the_stream_fails_the_attempt(fake):
    fake, url = fake
    r = run(config(url, extra_body={"fake": "broken"}, num_requests=1))["requests"][0]
    assert r["attempts"][0]["outcome"] == "error: engine died"


def test_duration_run_with_an_open_loop(fake):
    fake, url = fake
    result = run(
        config(
            url, concurrency=None, rate=20.0, arrival="constant", num_requests=None, duration_s=0.5
        )
    )
    s = result["summary"]
    assert s["requests"] == 10  # offsets 0, 0.05, ..., 0.45
    assert s["completed"] == 10  # in flight at the end: waited for
    assert result["duration_s"] >= 0.45
    starts = [r["start"] for r in result["requests"]]
    assert starts[-1] == pytest.approx(0.45, abs=0.05)


def test_duration_run_closed_loop_and_warmup(fake):
    fake, url = fake
    result = run(config(url, num_requests=None, duration_s=0.3, warmup=2))
    s = result["summary"]
    assert s["completed"] == s["requests"] >= 2
    assert len(fake.bodies) == s["requests"] + 2  # warmup requests are not recorded


def test_sweep_gives_one_result_per_rate(fake):
    fake, url = fake
    results = sweep(config(url, num_requests=3), [10.0, float("inf")])
    assert [r["config"]["rate"] for r in results] == [10.0, "inf"]
    assert [r["config"]["concurrency"] for r in results] == [None, None]
    assert all(r["summary"]["completed"] == 3 for r in results)
    json.dumps(results, allow_nan=False)


def test_unreachable_url():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(LoadgenError, match="cannot reach"):
        run(LoadConfig(base_url=f"http://127.0.0.1:{port}/v1", num_requests=1))


def test_cli(fake, tmp_path, capsys):
    fake, url = fake
    out = tmp_path / "r.json"
    argv = [
        "--url",
        url,
        "--concurrency",
        "2",
        "--num-requests",
        "3",
        "--input-len",
        "8",
        "--output-len",
        "5",
    ]
    assert (
        main([*argv, "--slo", "ttft_ms=5000,tpot_ms=5000", "--no-progress", "--out", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "Successful requests:                     3" in printed
    assert "Request goodput (req/s):" in printed
    data = json.loads(out.read_text())
    assert data["summary"]["good_requests"] == 3


def test_cli_sweep(fake, capsys):
    fake, url = fake
    argv = [
        "--url",
        url,
        "--sweep",
        "50,100",
        "--num-requests",
        "2",
        "--output-len",
        "5",
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("Successful requests:") == 2
    assert "TTFT p50" in printed


def test_cli_fails_when_no_request_succeeds(fake, capsys):
    fake, url = fake
    argv = ["--url", url, "--num-requests", "2", "--output-len", "5", "--no-progress"]
    assert main([*argv, "--extra-body", '{"fake": "400"}']) == 1
    captured = capsys.readouterr()
    assert "Failed requests:                         2" in captured.out
    assert "no request succeeded (first error: http 400: max_tokens too big" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "2", "--rate", "1"], "not allowed with"),
        (["--rate", "0"], "must be > 0"),
        (["--rate", "-3"], "must be > 0"),
        (["--concurrency", "0"], "must be >= 1"),
        (["--burstiness", "0.5", "--rate", "1"], "--burstiness needs --arrival gamma"),
        (["--arrival", "gamma"], "--arrival needs --rate"),
        (["--slo", "ttft=5"], "--slo"),
        (["--range-ratio", "1.5"], "range_ratio"),
        (["--rate", "inf", "--duration", "5"], "infinite rate needs num_requests"),
    ],
)
def test_cli_rejects_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--url", "http://127.0.0.1:1/v1", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_unreachable_url_is_one_line(capsys):
    assert main(["--url", "http://127.0.0.1:1/v1", "--num-requests", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m lab.loadgen: error: cannot reach http://127.0.0.1:1/v1/models")
    assert err.count("\n") == 1 and "Traceback" not in err
