"""`python -m lab.engine.serve --model lab/engine/weights/target --port 8100`: the engine
behind an OpenAI-compatible HTTP API.

Routes: `POST /v1/completions`, `POST /v1/chat/completions` (stream true or false; SSE
chunks ending with `data: [DONE]`; `usage` with prompt and completion tokens), `GET
/v1/models`, `GET /health`, `GET /metrics` (Prometheus text: counters and gauges).

How a request flows (the hops a client can draw as a waterfall; each response carries them
in a `Server-Timing` header and, for streams, in the final chunk's `server_timing`):

    tokenize  the handler encodes the prompt (in a worker thread, never on the event loop)
    queue     submitted to the engine thread -> first scheduled in an engine step
    prefill   first scheduled -> first token sampled (several steps if chunked)
    decode    first token -> last token
    stream    last token -> response complete (final detokenize, last writes)

These five are sequential and sum to `total`. `detokenize` (time spent turning tokens into
text, summed) overlaps decode in a stream and is reported beside them.

The engine is not thread-safe, so it lives in one thread (`EngineWorker`) that owns it: the
event loop hands requests and aborts over an inbox, and the worker hands tokens back with one
`call_soon_threadsafe` per step. Admission is bounded: at most `max_num_seqs` run and
`max_queue` wait; beyond that a request gets 429 at once, never an unbounded pile-up.

Abort on disconnect (as in vLLM and mini-sglang): while a response is pending, the handler
also listens for `http.disconnect`; when a client goes away the request is aborted before the
engine's next step, so at most the step already running produces a token for nobody and the
sequence's KV blocks are freed at once. `--no-abort-on-disconnect` keeps decoding to the end
instead (the contrast the cancellation labs measure). Counters: `aborted_requests`,
`tokens_after_disconnect` (tokens generated after the disconnect was noticed).

Chat requests use a plain template (the bundled model is a code model with no chat format):
the messages' contents joined by newlines.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

WEIGHTS = Path(__file__).resolve().parent / "weights"
MAX_BODY_BYTES = 1 << 20
# A prompt longer than max_model_len x this many characters cannot fit the context, whatever
# it says: no token of a byte-level BPE covers more characters than its vocabulary string has
# bytes (the bundled tokenizer's longest is 45), so such prompts are refused before tokenising
# (a 1 MB prompt used to hold the event loop for seconds). Raised to the vocabulary's longest
# token if a tokenizer has longer ones.
CHARS_PER_TOKEN_BOUND = 64
HOPS = ("tokenize", "queue", "prefill", "decode", "stream")


# --- errors -----------------------------------------------------------------------------
class APIError(Exception):
    """An OpenAI-style error: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body = {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
        return JSONResponse(body, status_code=self.status, headers=self.headers)


# --- request schemas --------------------------------------------------------------------
class _Common(BaseModel):
    """Sampling fields shared by both endpoints. Unknown fields are ignored (as vLLM does)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2, allow_inf_nan=False)
    top_p: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=0, ge=0)  # vLLM extension; 0 = all tokens
    n: int = 1
    stream: bool = False
    stream_options: dict[str, bool] | None = None
    stop: str | list[str] | None = Field(default=None, validate_default=True)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    ignore_eos: bool = False  # vLLM extension (benchmarks)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: Any = None
    user: str | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int) -> int:
        if n != 1:
            raise ValueError("only n=1 is supported by this engine")
        return n

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop: str | list[str] | None) -> list[str]:
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty strings")
        return stops

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, value: float) -> float:
        if value != 0:
            raise ValueError("penalties are not supported by this engine (use 0)")
        return value

    @field_validator("logprobs")
    @classmethod
    def _no_logprobs(cls, value: Any) -> Any:
        if value not in (None, False, 0):
            raise ValueError("logprobs are not supported by this engine")
        return None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("continuous_usage_stats"))


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, prompt: Any) -> str | list[int]:
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            if len(prompt) != 1:
                raise ValueError("send one prompt per request (batched prompts: use several)")
            prompt = prompt[0]
        if not prompt:
            raise ValueError("the prompt is empty")
        return prompt

    @field_validator("echo", mode="after")
    @classmethod
    def _no_echo(cls, echo: bool) -> bool:
        if echo:
            raise ValueError("echo is not supported by this engine")
        return echo

    @field_validator("suffix", "best_of")
    @classmethod
    def _unsupported(cls, value: Any) -> Any:
        if value not in (None, 1):
            raise ValueError("not supported by this engine")
        return value


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts are supported")
            parts.append(part["text"])
        return "".join(parts)


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def prompt_text(self) -> str:
        return "\n".join(m.text() for m in self.messages)


def _validation_error(exc: ValidationError) -> APIError:
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first.get("loc", ())) or None
    message = first.get("msg", "invalid request").removeprefix("Value error, ")
    return APIError(400, f"{param}: {message}" if param else message, param=param)


# --- the engine thread --------------------------------------------------------------------
@dataclass
class Handle:
    """One request in flight, shared by its handler (event loop) and the engine thread."""

    tokens: list[int]
    params: Any  # SamplingParams
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    submitted: float = field(default_factory=time.perf_counter)
    request_id: int | None = None
    disconnected_at: float | None = None
    done: bool = False


class EngineWorker:
    """Owns the engine in one thread; requests and aborts arrive over an inbox."""

    def __init__(self, engine, max_queue: int = 64, abort_on_disconnect: bool = True):
        self.engine = engine
        engine.step_log = collections.deque(maxlen=256)  # a server runs for days
        self.max_queue = max_queue
        self.capacity = engine.config.max_num_seqs + max_queue
        self.abort_on_disconnect = abort_on_disconnect
        self.counters = collections.Counter()
        self.gauges: dict[str, float] = {}
        self.in_flight = 0
        self._lock = threading.Lock()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._active: dict[int, Handle] = {}
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.error: str | None = None

    # event-loop side
    def start(self) -> None:
        self._refresh_gauges()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, tokens: list[int], params) -> Handle:
        """Hand a request to the engine; APIError 429 when running + waiting is full."""
        with self._lock:
            if self.in_flight >= self.capacity:
                self.counters["rejected_requests"] += 1
                raise APIError(
                    429,
                    f"The server is at capacity ({self.engine.config.max_num_seqs} running, "
                    f"{self.max_queue} waiting); retry later.",
                    type_="rate_limit_error",
                    code="server_busy",
                    headers={"Retry-After": "1"},
                )
            self.in_flight += 1
        handle = Handle(tokens, params, asyncio.get_running_loop())
        self._inbox.put(("add", handle))
        self._wake.set()
        return handle

    def disconnected(self, handle: Handle) -> None:
        """The client went away: abort (unless configured not to) before the next step."""
        if handle.done or handle.disconnected_at is not None:
            return
        handle.disconnected_at = time.perf_counter()
        self.counters["disconnects"] += 1
        if self.abort_on_disconnect:
            self._inbox.put(("abort", handle))
            self._wake.set()

    def cancel(self, handle: Handle) -> None:
        """The handler is done with a request that may still run (a stop string matched)."""
        if not handle.done:
            self._inbox.put(("abort", handle))
            self._wake.set()

    def release(self) -> None:
        with self._lock:
            self.in_flight -= 1

    # engine-thread side
    def _run(self) -> None:
        engine = self.engine
        while not self._stop.is_set():
            self._drain_inbox()
            if not engine.has_unfinished():
                self._refresh_gauges()
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            started = time.perf_counter()
            try:
                emitted = engine.step()
            except Exception as exc:  # keep serving: fail the requests in this batch
                self.error = f"{type(exc).__name__}: {exc}"
                self.counters["engine_errors"] += 1
                for handle in list(self._active.values()):
                    engine.abort(handle.request_id)
                    self._finish(handle, "error", {"error": self.error})
                continue
            now = time.perf_counter()
            self.counters["engine_steps"] += 1
            self.counters["engine_busy_seconds"] += now - started
            self.counters["generated_tokens"] += len(emitted)
            out: dict[asyncio.AbstractEventLoop, list] = collections.defaultdict(list)
            for rid, token in emitted.items():
                handle = self._active[rid]
                out[handle.loop].append((handle, ("token", token)))
            for rid, handle in list(self._active.items()):
                seq = engine.requests[rid].seq
                if seq.is_done:
                    params = seq.sampling_params
                    eos = seq.last_token in params.stop_token_ids or (
                        not params.ignore_eos
                        and seq.last_token in engine.model.config.eos_token_ids
                    )
                    reason = "stop" if eos else "length"
                    out[handle.loop].append((handle, self._finish(handle, reason, deliver=False)))
            for loop, items in out.items():
                self._deliver(loop, items)
            self._refresh_gauges()

    def _drain_inbox(self) -> None:
        while True:
            try:
                kind, handle = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "add":
                try:
                    handle.request_id = self.engine.add_request(handle.tokens, handle.params)
                except ValueError as exc:
                    self._deliver(handle.loop, [(handle, ("error", str(exc)))])
                    handle.done = True
                    continue
                self._active[handle.request_id] = handle
                self.counters["requests"] += 1
                self.counters["prompt_tokens"] += len(handle.tokens)
            elif handle.request_id in self._active:  # abort
                self.engine.abort(handle.request_id)
                reason = "abort" if handle.disconnected_at is not None else "cancelled"
                self._finish(handle, reason)

    def _finish(self, handle: Handle, reason: str, extra: dict | None = None, deliver=True):
        """Close a request: metrics, counters, forget it. Returns the event for the handler."""
        state = self.engine.requests.pop(handle.request_id)
        self._active.pop(handle.request_id, None)
        handle.done = True
        metrics = state.metrics()
        metrics["first_scheduled"] = state.first_scheduled
        metrics["token_times"] = state.token_times
        self.counters[f"finished_{reason}"] += 1
        if handle.disconnected_at is not None:
            late = sum(t > handle.disconnected_at for t in state.token_times)
            self.counters["tokens_after_disconnect"] += late
            metrics["tokens_after_disconnect"] = late
            if reason == "abort":
                self.counters["aborted_requests"] += 1
        event = ("done", reason, {**metrics, **(extra or {})})
        if deliver:
            self._deliver(handle.loop, [(handle, event)])
        return event

    @staticmethod
    def _deliver(loop: asyncio.AbstractEventLoop, items: list) -> None:
        def put_all() -> None:
            for handle, event in items:
                handle.events.put_nowait(event)

        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody to tell
            loop.call_soon_threadsafe(put_all)

    def _refresh_gauges(self) -> None:
        engine = self.engine
        stats = engine.manager.stats()
        self.gauges = {
            "running_requests": len(engine.scheduler.running),
            "waiting_requests": len(engine.scheduler.waiting),
            "kv_blocks_allocated": stats.get("allocated_blocks", stats.get("num_seqs", 0)),
            "kv_blocks_free": stats["free_blocks"],
            "kv_blocks_total": stats.get("num_blocks", engine.config.max_num_seqs),
        }

    def snapshot(self) -> dict[str, float]:
        """Counters and gauges (the engine's as of its last step; in-flight live)."""
        return {**self.counters, **self.gauges, "in_flight_requests": self.in_flight}


# --- text -------------------------------------------------------------------------------
class Detokenizer:
    """Incremental detokenization (as vLLM's): text for new tokens only, holding back a
    token that ends in the middle of a UTF-8 character."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.tokens: list[int] = []
        self.prefix_offset = self.read_offset = 0
        self.seconds = 0.0

    def add(self, tokens: list[int]) -> str:
        started = time.perf_counter()
        self.tokens.extend(tokens)
        decode = self.tokenizer.decode
        prefix = decode(self.tokens[self.prefix_offset : self.read_offset])
        full = decode(self.tokens[self.prefix_offset :])
        delta = ""
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        self.seconds += time.perf_counter() - started
        return delta


class StopChecker:
    """OpenAI `stop` strings: text is released only once no stop string can start in it."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, delta: str, final: bool = False) -> str:
        """Text that can be released now; sets `stopped` when a stop string appears."""
        start = max(0, len(self.text) - self.hold)
        self.text += delta
        hits = [i for s in self.stops if (i := self.text.find(s, start)) >= 0]
        if hits:
            self.text, self.stopped = self.text[: min(hits)], True
        end = len(self.text) if (final or self.stopped) else len(self.text) - self.hold
        out = self.text[self.sent : max(end, self.sent)]
        self.sent += len(out)
        return out


# --- the app ----------------------------------------------------------------------------
@dataclass
class Served:
    worker: EngineWorker
    model_name: str
    api_key: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))


def _server_timing(hops: dict[str, float]) -> str:
    return ", ".join(f"{name};dur={ms:.3f}" for name, ms in hops.items())


def _hops(t0: float, tokenized: float, handle: Handle, metrics: dict, end: float, detok: float):
    """The sequential hops (ms) from the handler's clock and the engine's timestamps."""
    sched = metrics.get("first_scheduled") or end
    times = metrics.get("token_times") or []
    first, last = (times[0], times[-1]) if times else (end, end)
    marks = [t0, tokenized, max(sched, tokenized), max(first, sched), max(last, first), end]
    hops = {name: (b - a) * 1000 for name, a, b in zip(HOPS, marks[:-1], marks[1:], strict=True)}
    hops["detokenize"] = detok * 1000
    hops["total"] = (end - t0) * 1000
    return hops


def prompt_char_limit(engine) -> tuple[int, int]:
    """(the longest prompt in characters that could still fit the context, the bound on
    characters per token it assumes)."""
    longest = max((len(t) for t in engine.tokenizer.get_vocab()), default=1)
    per_token = max(CHARS_PER_TOKEN_BOUND, longest)
    return engine.config.max_model_len * per_token, per_token


def build_app(served: Served) -> Starlette:
    worker = served.worker
    engine = worker.engine
    char_limit, chars_per_token = prompt_char_limit(engine)

    async def parse(request: Request, schema: type[BaseModel]) -> Any:
        if served.api_key and request.headers.get("authorization") != f"Bearer {served.api_key}":
            raise APIError(
                401,
                "Missing or wrong API key.",
                type_="authentication_error",
                code="invalid_api_key",
            )
        length = request.headers.get("content-length") or "0"
        if not length.isdigit():  # a proxy or a hand-made request; uvicorn refuses these
            raise APIError(400, "The Content-Length header is not a number.")
        if int(length) > MAX_BODY_BYTES:
            raise APIError(413, f"Request body over {MAX_BODY_BYTES} bytes.")
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise APIError(413, f"Request body over {MAX_BODY_BYTES} bytes.")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise APIError(400, "The body is not valid JSON.") from None
        except RecursionError:  # e.g. 5,000 nested brackets
            raise APIError(400, "The body's JSON is nested too deeply.") from None
        if not isinstance(data, dict):
            raise APIError(400, "The body must be a JSON object.")
        try:
            req = schema.model_validate(data)
        except ValidationError as exc:
            raise _validation_error(exc) from None
        if req.model != served.model_name:
            raise APIError(
                404,
                f"The model {req.model!r} does not exist; this server has {served.model_name!r}.",
                param="model",
                code="model_not_found",
            )
        return req

    def sampling(req: _Common, prompt_len: int):
        from lab.engine.sampler import SamplingParams

        limit = engine.config.max_model_len
        max_tokens = getattr(req, "max_completion_tokens", None) or req.max_tokens
        if prompt_len >= limit:  # no room for even one token (the default would be <= 0)
            where = "messages" if isinstance(req, ChatRequest) else "prompt"
            raise APIError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"is {prompt_len} tokens, which leaves no room for a completion. Please reduce "
                "the prompt.",
                param=where,
            )
        if max_tokens is None:
            max_tokens = (
                min(16, limit - prompt_len)
                if isinstance(req, CompletionRequest)
                else limit - prompt_len
            )
        if prompt_len + max_tokens > limit:
            raise APIError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_len + max_tokens} tokens ({prompt_len} in the prompt, {max_tokens} in "
                f"the completion). Please reduce the prompt or max_tokens.",
                param="max_tokens",
            )
        return SamplingParams(
            temperature=req.temperature,
            top_k=req.top_k,
            top_p=req.top_p,
            seed=req.seed,
            max_tokens=max_tokens,
            ignore_eos=req.ignore_eos,
        )

    def check_prompt_size(req: _Common, prompt: str | list[int]) -> None:
        """Refuse, before any tokenising, a prompt too long to fit the context whatever
        its tokens (text: by characters; token ids: by count)."""
        limit = engine.config.max_model_len
        where = "messages" if isinstance(req, ChatRequest) else "prompt"
        if isinstance(prompt, str) and len(prompt) > char_limit:
            raise APIError(
                400,
                f"This model's maximum context length is {limit} tokens, so a prompt can be at "
                f"most {char_limit} characters ({limit} tokens x at most {chars_per_token} "
                f"characters per token); yours is {len(prompt)} characters. Please reduce "
                "the prompt.",
                param=where,
                code="context_length_exceeded",
            )
        if isinstance(prompt, list) and len(prompt) >= limit:
            raise APIError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"is {len(prompt)} tokens, which leaves no room for a completion. Please reduce "
                "the prompt.",
                param=where,
                code="context_length_exceeded",
            )

    def tokenize(prompt: str | list[int]) -> list[int]:
        """Runs in a worker thread (anyio's pool): a long prompt must not hold the loop."""
        if isinstance(prompt, str):
            return engine.tokenizer.encode(prompt).ids
        vocab = engine.model.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            raise APIError(400, f"prompt: token ids must be in [0, {vocab}).", param="prompt")
        return list(prompt)

    async def generate(request: Request, chat: bool) -> Response:
        t0 = time.perf_counter()
        req = await parse(request, ChatRequest if chat else CompletionRequest)
        try:
            prompt = req.prompt_text() if chat else req.prompt
        except ValueError as exc:
            raise APIError(400, f"messages: {exc}", param="messages") from None
        check_prompt_size(req, prompt)
        tokens = await anyio.to_thread.run_sync(tokenize, prompt)
        tokenized = time.perf_counter()
        params = sampling(req, len(tokens))
        run = _Run(served, req, chat, t0, tokenized)
        run.handle = worker.submit(tokens, params)  # from here on, run.close() must follow
        if req.stream:
            return SSEResponse(
                run.stream(),
                on_disconnect=run.disconnected,
                finally_=run.close,
                headers={"Server-Timing": _server_timing({"tokenize": (tokenized - t0) * 1000})},
            )
        try:
            body, hops = await run.complete(request.receive)
        finally:
            run.close()
        return JSONResponse(body, headers={"Server-Timing": _server_timing(hops)})

    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await generate(request, chat=True)

    async def models(request: Request) -> Response:
        card = {
            "id": served.model_name,
            "object": "model",
            "created": served.created,
            "owned_by": "inference-trainer",
            "max_model_len": engine.config.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(request: Request) -> Response:
        if not worker.alive:
            return JSONResponse({"status": "engine thread stopped", "error": worker.error}, 503)
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        lines = []
        for name, value in sorted(worker.snapshot().items()):
            kind = "counter" if name in worker.counters else "gauge"
            metric = f"mini_engine_{name}" + ("_total" if kind == "counter" else "")
            lines += [f"# TYPE {metric} {kind}", f"{metric} {value:g}"]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    async def api_error(request: Request, exc: APIError) -> Response:
        return exc.response()

    async def http_error(request: Request, exc: HTTPException) -> Response:
        type_ = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        message = {
            404: f"No route {request.url.path}.",
            405: f"{request.method} is not allowed on {request.url.path}.",
        }.get(exc.status_code, str(exc.detail))
        return APIError(exc.status_code, message, type_=type_).response()

    async def server_error(request: Request, exc: Exception) -> Response:
        return APIError(
            500, f"Internal error: {type(exc).__name__}.", type_="server_error"
        ).response()

    routes = [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            APIError: api_error,
            HTTPException: http_error,
            Exception: server_error,
        },
    )
    app.state.served = served
    return app


class _Run:
    """One generation request from the handler's side: events in, OpenAI JSON out."""

    handle: Handle  # set once the engine accepted the request

    def __init__(self, served: Served, req: _Common, chat: bool, t0: float, tokenized: float):
        self.served, self.req, self.chat = served, req, chat
        self.ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.t0, self.tokenized = t0, tokenized
        self.detok = Detokenizer(served.worker.engine.tokenizer)
        self.stops = StopChecker(req.stop)
        self.created = int(time.time())
        self.completion_tokens = 0
        self.closed = False

    def disconnected(self) -> None:
        self.served.worker.disconnected(self.handle)

    def close(self) -> None:
        """Always called once the response ends, however it ends."""
        if self.closed:
            return
        self.closed = True
        if not self.handle.done and self.handle.disconnected_at is None:
            self.served.worker.cancel(self.handle)
        self.served.worker.release()

    async def events(self) -> AsyncIterator[tuple[list[int], tuple | None]]:
        """(new tokens, final event or None), coalescing whatever has arrived meanwhile."""
        q = self.handle.events
        while True:
            items = [await q.get()]
            while not q.empty():
                items.append(q.get_nowait())
            tokens = [e[1] for e in items if e[0] == "token"]
            final = next((e for e in items if e[0] != "token"), None)
            if final and final[0] == "error":
                raise APIError(400, final[1])
            if final and final[1] == "error":
                raise APIError(500, f"Engine error: {final[2]['error']}", type_="server_error")
            self.completion_tokens += len(tokens)
            yield tokens, final
            if final:
                return

    def _text(self, tokens: list[int], final: bool) -> str:
        text = self.stops.feed(self.detok.add(tokens) if tokens else "", final=final)
        if self.stops.stopped and not self.handle.done:
            self.served.worker.cancel(self.handle)
        return text

    def _usage(self) -> dict[str, int]:
        p, c = len(self.handle.tokens), self.completion_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _choice(self, text: str, finish: str | None, stream: bool) -> dict:
        if not self.chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        key = "delta" if stream else "message"
        content = (
            {"role": "assistant", "content": text}
            if not stream
            else ({"content": text} if text or finish is None else {})
        )
        return {"index": 0, key: content, "logprobs": None, "finish_reason": finish}

    def _envelope(self, choices: list[dict], stream: bool) -> dict:
        kind = ("chat.completion" if self.chat else "text_completion") + (
            ".chunk" if stream and self.chat else ""
        )
        return {
            "id": self.ident,
            "object": kind,
            "created": self.created,
            "model": self.served.model_name,
            "choices": choices,
        }

    def _finish_reason(self, final: tuple) -> str:
        return "stop" if self.stops.stopped else ("length" if final[1] == "length" else "stop")

    async def complete(self, receive) -> tuple[dict, dict]:
        """Wait for the whole completion, aborting if the client goes away meanwhile."""
        text, final = [], None

        async def collect():
            nonlocal final
            async for tokens, last in self.events():
                text.append(self._text(tokens, final=last is not None))
                final = last
                if self.stops.stopped:
                    final = final or ("done", "stop", {})
                    return

        async def watch():
            while (await receive())["type"] != "http.disconnect":
                pass
            self.disconnected()

        task = asyncio.ensure_future(watch())
        try:
            await collect()
        finally:
            task.cancel()
        metrics = final[2] if final else {}
        end = time.perf_counter()
        hops = _hops(self.t0, self.tokenized, self.handle, metrics, end, self.detok.seconds)
        body = self._envelope(
            [self._choice("".join(text), self._finish_reason(final), False)], False
        )
        body["usage"] = self._usage()
        return body, hops

    async def stream(self) -> AsyncIterator[bytes]:
        def sse(obj: dict) -> bytes:
            return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()

        if self.chat:
            yield sse(
                self._envelope(
                    [
                        self._choice("", None, True)
                        | {"delta": {"role": "assistant", "content": ""}}
                    ],
                    True,
                )
            )
        final = None
        async for tokens, last in self.events():
            text = self._text(tokens, final=last is not None)
            if self.stops.stopped and last is None:
                last = ("done", "stop", {})
            finish = self._finish_reason(last) if last else None
            if text or finish:
                chunk = self._envelope([self._choice(text, finish, True)], True)
                if self.req.continuous_usage:
                    chunk["usage"] = self._usage()
                if finish and not self.req.include_usage:
                    chunk["server_timing"] = self._stream_hops(last)
                yield sse(chunk)
            if last:
                final = last
                break
        if self.req.include_usage:
            chunk = self._envelope([], True)
            chunk["usage"] = self._usage()
            chunk["server_timing"] = self._stream_hops(final)
            yield sse(chunk)
        yield b"data: [DONE]\n\n"

    def _stream_hops(self, final: tuple) -> dict[str, float]:
        end = time.perf_counter()
        return _hops(self.t0, self.tokenized, self.handle, final[2], end, self.detok.seconds)


class SSEResponse(Response):
    """Streams SSE bytes while listening for `http.disconnect`; either way it ends, `finally_`
    runs. A disconnect (or a failed write) calls `on_disconnect` at once."""

    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        on_disconnect: Callable[[], None],
        finally_: Callable[[], None],
        headers: dict[str, str],
    ):
        # Not Response.__init__: that would render an empty body and send Content-Length: 0.
        self.status_code, self.background = 200, None
        self.init_headers({"Cache-Control": "no-cache", **headers})
        self.chunks, self.on_disconnect, self.finally_ = chunks, on_disconnect, finally_

    async def __call__(self, scope, receive, send) -> None:
        try:
            async with anyio.create_task_group() as tg:

                async def stream() -> None:
                    try:
                        await send(
                            {
                                "type": "http.response.start",
                                "status": 200,
                                "headers": self.raw_headers,
                            }
                        )
                        async for chunk in self.chunks:
                            await send(
                                {"type": "http.response.body", "body": chunk, "more_body": True}
                            )
                        await send({"type": "http.response.body", "body": b""})
                    except OSError:  # the write failed: the client is gone
                        self.on_disconnect()
                    except APIError as exc:  # after the headers: report in-band and end
                        body = json.dumps({"error": {"message": exc.message, "type": exc.type}})
                        with contextlib.suppress(OSError):
                            await send(
                                {"type": "http.response.body", "body": f"data: {body}\n\n".encode()}
                            )
                    tg.cancel_scope.cancel()

                async def listen() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    self.on_disconnect()
                    tg.cancel_scope.cancel()

                tg.start_soon(stream)
                tg.start_soon(listen)
        finally:
            self.finally_()


# --- running it ---------------------------------------------------------------------------
def make_served(
    model_dir: Path,
    *,
    max_num_seqs: int = 16,
    max_queue: int = 64,
    max_num_batched_tokens: int = 512,
    block_size: int = 16,
    mode: str = "paged",
    abort_on_disconnect: bool = True,
    served_model_name: str | None = None,
    api_key: str | None = None,
    device: str = "cpu",
) -> Served:
    from lab.engine.config import EngineConfig, ModelConfig
    from lab.engine.engine import LLMEngine

    shape = ModelConfig.from_hf(model_dir / "config.json")
    config = EngineConfig(
        mode=mode,
        block_size=block_size,
        max_model_len=shape.max_position_embeddings,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    engine = LLMEngine.from_pretrained(model_dir, config, device=device)
    if engine.tokenizer is None:
        raise SystemExit(f"No tokenizer.json in or beside {model_dir}.")
    worker = EngineWorker(engine, max_queue=max_queue, abort_on_disconnect=abort_on_disconnect)
    worker.start()
    return Served(worker, served_model_name or model_dir.name, api_key)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m lab.engine.serve", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", type=Path, default=WEIGHTS / "target", help="HF-format model dir")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--served-model-name", default=None, help="default: the model dir's name")
    p.add_argument("--max-num-seqs", type=int, default=16, help="running requests at most")
    p.add_argument(
        "--max-queue", type=int, default=64, help="waiting requests at most; more get 429"
    )
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--mode", choices=["paged", "contiguous", "none"], default="paged")
    p.add_argument(
        "--no-abort-on-disconnect",
        action="store_true",
        help="keep decoding for clients that went away (the contrast)",
    )
    p.add_argument("--api-key", default=os.environ.get("ENGINE_API_KEY"))
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "port"):
        if getattr(args, name) < (0 if name == "port" else 1):
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.max_queue < 0:
        p.error("--max-queue must be >= 0")
    if not (args.model / "config.json").exists():
        p.error(f"no model at {args.model} (expected config.json and model.safetensors)")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch
    import uvicorn

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    served = make_served(
        args.model,
        max_num_seqs=args.max_num_seqs,
        max_queue=args.max_queue,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        mode=args.mode,
        abort_on_disconnect=not args.no_abort_on_disconnect,
        served_model_name=args.served_model_name,
        api_key=args.api_key,
        device=args.device,
    )
    print(f"Serving {served.model_name} on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(
        build_app(served),
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    served.worker.stop()
    return 0


# --- a server in a child process (labs, tests, benches) --------------------------------------
def read_metrics(url: str) -> dict[str, float]:
    """The server's /metrics as {name without the mini_engine_ prefix: value}; `url` is the
    base URL ending in /v1."""
    import httpx

    text = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=10).text
    pairs = (line.split() for line in text.splitlines() if not line.startswith("#"))
    return {name.removeprefix("mini_engine_"): float(value) for name, value in pairs}


def wait_idle(url: str, check: Callable[[], None] = lambda: None, timeout: float = 120):
    """Metrics once nothing runs or waits (a naive server finishes its orphans first);
    `check` is called while waiting (a lab's cancel check)."""
    deadline = time.monotonic() + timeout
    while True:
        m = read_metrics(url)
        if m.get("running_requests") == 0 and m.get("in_flight_requests") == 0:
            return m
        if time.monotonic() > deadline:
            raise RuntimeError(f"The engine server did not go idle within {timeout:g} s.")
        check()
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def spawn(*args: str, timeout: float = 90, threads: int | None = 1) -> Iterator[str]:
    """Run `python -m lab.engine.serve` on a free loopback port; yields the base URL
    (`http://127.0.0.1:PORT/v1`) once /health answers; stops the process on exit."""

    port = free_port()
    cmd = [sys.executable, "-m", "lab.engine.serve", "--port", str(port), *args]
    if threads:
        cmd += ["--threads", str(threads)]
    # stderr to a file, not a pipe: a chatty server must never block on a full pipe.
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        yield from _serve_until_done(proc, log, port, timeout)


def _serve_until_done(proc, log, port: int, timeout: float) -> Iterator[str]:
    import httpx

    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(
                    f"The engine server exited ({proc.returncode}): {log.read()[-2000:]}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"The engine server did not answer /health within {timeout:g} s."
                )
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
