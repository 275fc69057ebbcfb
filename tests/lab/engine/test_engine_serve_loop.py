"""The engine server keeps its event loop free (issue 16, finding 6): a prompt too long for
the context is refused by its length before any tokenising, with the limit in the message,
and an accepted prompt is tokenised off the loop, so /health and other requests answer
meanwhile. A real uvicorn serves `build_app` with the bundled model and its real tokenizer;
the tokenizer is wrapped only to see what it is asked to encode and to hold one marked
prompt's encoding until the test has had its /health answer."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
import uvicorn

from lab.engine.server.app import build_app
from lab.engine.server.limits import prompt_char_limit
from lab.engine.server.served import WEIGHTS, make_served

pytestmark = pytest.mark.timeout(240)

MARK = "# gated\n"
HOLD_S = 30.0  # the most a marked encode waits: old code (encode on the loop) fails, not hangs


class WatchedTokenizer:
    """The real tokenizer; records the length of every text it encodes, and holds the
    encoding of a text starting with MARK until `release` is set (at most HOLD_S)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.encoded: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.released_in_time: bool | None = None

    def encode(self, text, *args, **kwargs):
        self.encoded.append(len(text))
        if text.startswith(MARK):
            self.entered.set()
            self.released_in_time = self.release.wait(HOLD_S)
        return self.inner.encode(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture(scope="module")
def server():
    served = make_served(WEIGHTS / "target", max_num_seqs=2, max_queue=4)
    watched = served.worker.engine.tokenizer = WatchedTokenizer(served.worker.engine.tokenizer)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(build_app(served), log_level="warning", lifespan="off")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", served, watched
    uv.should_exit = True
    thread.join(10)
    served.worker.stop()


def test_health_answers_while_a_prompt_is_being_tokenised(server):
    url, _, watched = server
    done: list[str] = []
    results: dict[str, httpx.Response] = {}

    def generate() -> None:
        body = {"model": "target", "prompt": MARK + "def f(x):\n" * 40, "max_tokens": 1}
        results["generate"] = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
        done.append("generate")

    thread = threading.Thread(target=generate)
    thread.start()
    try:
        assert watched.entered.wait(60), "the prompt never reached the tokenizer"
        # Its encoding cannot finish before this /health answer releases it.
        health = httpx.get(f"{url}/health", timeout=120)
        done.append("health")
    finally:
        watched.release.set()
        thread.join(120)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert watched.released_in_time is True, "/health waited for the tokenizer (event loop held)"
    assert done == ["health", "generate"]
    assert results["generate"].status_code == 200, results["generate"].text


@pytest.mark.parametrize("chat", [False, True])
def test_a_1mb_prompt_is_refused_by_its_length_before_tokenising(server, chat):
    url, served, watched = server
    limit, per_token = prompt_char_limit(served.worker.engine)
    context = served.worker.engine.config.max_model_len
    assert (limit, per_token) == (context * 64, 64)  # 512 x 64 = 32,768 characters
    text = MARK + "def f(x): return x + 1  " * 40_000  # 1,000,008 characters, a 1 MB body
    if chat:
        route, body = "chat/completions", {"messages": [{"role": "user", "content": text}]}
    else:
        route, body = "completions", {"prompt": text}
    encoded_before = list(watched.encoded)
    outcome: dict[str, httpx.Response] = {}

    def big() -> None:
        outcome["big"] = httpx.post(
            f"{url}/v1/{route}", json={"model": "target", **body}, timeout=120
        )

    thread = threading.Thread(target=big)
    thread.start()
    try:
        health = httpx.get(f"{url}/health", timeout=120)  # answered while it is in flight
    finally:
        watched.release.set()  # (old code: the marked prompt would be held in encode)
        thread.join(120)
    watched.release.clear()
    assert health.status_code == 200
    response = outcome["big"]
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == ("messages" if chat else "prompt")
    assert error["type"] == "invalid_request_error" and error["code"] == "context_length_exceeded"
    assert f"maximum context length is {context} tokens" in error["message"]
    assert f"at most {limit} characters" in error["message"]
    assert f"yours is {len(text)} characters" in error["message"]
    assert watched.encoded == encoded_before, "the prompt was tokenised before being refused"
    # Just under the limit is tokenised (off the loop) and refused by its token count.
    near = {"model": "target", "prompt": "def f(x):\n" * (limit // 10), "max_tokens": 1}
    response = httpx.post(f"{url}/v1/completions", json=near, timeout=120)
    assert response.status_code == 400 and "tokens" in response.json()["error"]["message"]
    assert watched.encoded[-1] == len(near["prompt"])


def test_metrics_say_which_dtype_runs_and_why(server):
    url, served, _ = server
    text = httpx.get(f"{url}/metrics", timeout=10).text
    line = next(ln for ln in text.splitlines() if ln.startswith("mini_engine_dtype_info{"))
    assert f'dtype="{served.dtype.dtype}"' in line and line.endswith("} 1")
    assert served.dtype.why in ("measured", "cached", "explicit")
    assert "fastest correct dtype" in line or "set explicitly" in line
