"""One attempt against an OpenAI-compatible endpoint: a streaming POST, timed chunk by chunk.

`POST {base_url}/completions` (or `/chat/completions`, the prompt as the one user message)
with `stream: true` and `stream_options: {"include_usage": true, "continuous_usage_stats":
true}`, so that a server that supports it (vLLM, `lab.engine.server`) reports usage in every
chunk; `ignore_eos` (a vLLM extension, honoured by our server) and any extra body fields are
passed through. The response is server-sent events: `data: {json}` lines ending with
`data: [DONE]`. Each data line is timestamped with `time.perf_counter()` as it arrives.

The timeout is a total deadline for the attempt (connect, queueing, prefill and the whole
stream), enforced with `asyncio.timeout` around it, not httpx's per-read timeout, which a
slow but steady stream would never trip. When it fires the response is closed without being
read to the end, so httpx drops the connection and the server sees the client go away (and
can abort the request). After `[DONE]` the rest of the body is read so that the connection
goes back to the pool.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from lab.loadgen.metrics import Attempt

ENDPOINTS = {"completions": "/completions", "chat": "/chat/completions"}


class LoadgenError(Exception):
    """A setup failure the benchmark cannot run past (unreachable URL, no model)."""


@dataclass
class Received:
    """A chunk with choices as received: arrival (seconds since the attempt's start), text,
    and the running `usage.completion_tokens` if the chunk carried usage."""

    time: float
    text: str
    completion_tokens: int | None


@dataclass
class AttemptResult:
    attempt: Attempt
    chunks: list[Received] = field(default_factory=list)
    prompt_tokens: int | None = None  # from the last usage seen
    completion_tokens: int | None = None
    server_timing: dict[str, Any] | None = None
    done: float | None = None  # seconds since the attempt's start when [DONE] arrived

    @property
    def ok(self) -> bool:
        return self.attempt.outcome == "ok"


def make_client(api_key: str | None = None) -> httpx.AsyncClient:
    """One client for the whole run. No pool limit (the load is bounded by the run's own
    concurrency, so requests never wait for a connection), no httpx timeouts (the deadline
    is per attempt), and no proxies from the environment (they would distort latency)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.AsyncClient(
        headers=headers,
        timeout=httpx.Timeout(None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
        trust_env=False,
    )


def build_payload(
    endpoint: str,
    model: str,
    prompt: str,
    max_tokens: int,
    temperature: float = 0.0,
    ignore_eos: bool = False,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    body |= {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return body | (extra_body or {})


def error_message(body: bytes) -> str:
    """The message of an OpenAI-style error body `{"error": {"message": ...}}`, else the
    start of the body."""
    try:
        data = json.loads(body)
        message = data["error"]["message"] if isinstance(data["error"], dict) else data["error"]
        return str(message)
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace").strip()[:200]


def _join(head: str, message: str) -> str:
    return f"{head}: {message}" if message else head


def _chunk_text(endpoint: str, choice: dict[str, Any]) -> str:
    if endpoint == "chat":
        return (choice.get("delta") or {}).get("content") or ""
    return choice.get("text") or ""


async def _stream(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    endpoint: str,
    result: AttemptResult,
) -> str:
    """Run the request, filling `result`; return the outcome."""
    start = result.attempt.start
    async with client.stream("POST", url, json=payload) as response:
        if response.status_code >= 300:
            message = error_message(await response.aread())
            return _join(f"http {response.status_code}", message)
        async for line in response.aiter_lines():
            now = time.perf_counter() - start
            if result.done is not None or not line.startswith("data:"):
                continue  # after [DONE]: drain; otherwise SSE comments, event names, blanks
            data = line.removeprefix("data:").strip()
            if data == "[DONE]":
                result.done = now
                continue
            try:
                event = json.loads(data)
            except ValueError:
                event = None
            if not isinstance(event, dict):
                return f"error: not a JSON object in stream: {data[:100]}"
            if event.get("error"):
                return f"error: {error_message(data.encode())}"
            usage = event.get("usage") or {}
            if "prompt_tokens" in usage:
                result.prompt_tokens = usage["prompt_tokens"]
            if "completion_tokens" in usage:
                result.completion_tokens = usage["completion_tokens"]
            if event.get("server_timing") is not None:
                result.server_timing = event["server_timing"]
            if choices := event.get("choices"):
                text = _chunk_text(endpoint, choices[0])
                result.chunks.append(Received(now, text, usage.get("completion_tokens")))
    return "ok" if result.done is not None else "error: stream ended before [DONE]"


async def send(
    client: httpx.AsyncClient,
    url: str,
    payload: dict[str, Any],
    endpoint: str = "completions",
    timeout_s: float | None = None,
) -> AttemptResult:
    """One attempt. Never raises for the request's own failures: they become the outcome."""
    start = time.perf_counter()
    result = AttemptResult(Attempt(start, start, ""))
    try:
        async with asyncio.timeout(timeout_s):
            outcome = await _stream(client, url, payload, endpoint, result)
    except TimeoutError:
        outcome = "timeout"
    except (httpx.HTTPError, OSError) as exc:
        outcome = _join(f"error: {type(exc).__name__}", str(exc))
    end = time.perf_counter()
    if outcome == "ok" and result.done is not None:
        end = start + result.done
    result.attempt.end, result.attempt.outcome = end, outcome
    return result


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response:
    try:
        return await client.get(url, timeout=10.0)
    except (httpx.HTTPError, OSError) as exc:
        raise LoadgenError(_join(f"cannot reach {url}: {type(exc).__name__}", str(exc))) from None


async def list_models(client: httpx.AsyncClient, base_url: str) -> list[str]:
    """GET {base_url}/models -> ids; LoadgenError if the server cannot be reached or says no."""
    url = f"{base_url}/models"
    response = await _get(client, url)
    if response.status_code != 200:
        message = error_message(response.content)
        raise LoadgenError(_join(f"GET {url} answered {response.status_code}", message))
    try:
        return [m["id"] for m in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise LoadgenError(f"GET {url} did not return an OpenAI model list") from None


async def resolve_model(client: httpx.AsyncClient, base_url: str, model: str | None) -> str:
    """The model to ask for: `model`, else the first one the server lists. Either way the
    server must answer (a quick check that the URL is right before the benchmark starts)."""
    if model is not None:
        await _get(client, f"{base_url}/models")
        return model
    models = await list_models(client, base_url)
    if not models:
        raise LoadgenError(f"{base_url}/models lists no model; pass --model")
    return models[0]
