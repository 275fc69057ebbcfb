"""Responses to a generation request: `Run` turns the engine's events for one request into
OpenAI JSON (one body, or SSE chunks ending `data: [DONE]`), and `SSEResponse` streams them
while listening for the client's disconnect. Both report the request's hops (`timing.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.responses import JSONResponse, Response

from lab.engine.server.protocol import APIError, GenerationRequest
from lab.engine.server.served import Served
from lab.engine.server.text import Detokenizer, StopChecker
from lab.engine.server.timing import hop_times_ms, server_timing
from lab.engine.server.worker import Handle

log = logging.getLogger(__name__)


async def respond(run: Run, receive) -> Response:
    """The response for a request the engine has accepted: a stream (`req.stream`) or one
    JSON body; either way `run.close()` follows once it ends."""
    if run.req.stream:
        tokenize_ms = (run.tokenized - run.t0) * 1000
        return SSEResponse(
            run.stream(),
            on_disconnect=run.disconnected,
            finally_=run.close,
            headers={"Server-Timing": server_timing({"tokenize": tokenize_ms})},
        )
    try:
        body, hops = await run.complete(receive)
    finally:
        run.close()
    return JSONResponse(body, headers={"Server-Timing": server_timing(hops)})


class Run:
    """One generation request from the handler's side: events in, OpenAI JSON out."""

    handle: Handle  # set once the engine accepted the request

    def __init__(
        self, served: Served, req: GenerationRequest, chat: bool, t0: float, tokenized: float
    ):
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
                raise self._refused(final[1])
            if final and final[1] == "error":
                raise APIError(
                    500,
                    f"Engine error: {final[2]['error']}",
                    type_="server_error",
                    code="engine_error",
                )
            self.completion_tokens += len(tokens)
            yield tokens, final
            if final:
                return

    def _refused(self, message: str) -> APIError:
        """The engine's own refusal (add_request's ValueError). The handler checks the same
        limits first, so this is a backstop: an empty prompt or one past the context."""
        param = "messages" if self.chat else "prompt"
        code = "context_length_exceeded" if self.handle.tokens else "invalid_value"
        return APIError(400, message, param=param, code=code)

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
        hops = hop_times_ms(self.t0, self.tokenized, metrics, end, self.detok.seconds)
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
        return hop_times_ms(self.t0, self.tokenized, final[2], end, self.detok.seconds)


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
                        await self._send_error(send, exc)
                    except Exception as exc:  # a bug: still tell the client, in-band
                        log.exception("A stream failed after its headers were sent.")
                        name = type(exc).__name__
                        error = APIError(
                            500, f"Internal error: {name}.", "server_error", code="internal_error"
                        )
                        await self._send_error(send, error)
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

    @staticmethod
    async def _send_error(send, exc: APIError) -> None:
        """An OpenAI error event (`data: {"error": {message, type, param, code}}`), which the
        openai client raises as `openai.APIError`; the stream then ends without [DONE]."""
        event = f"data: {json.dumps(exc.body())}\n\n".encode()
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
