"""Server-sent events fed by a Redis stream (ASGI only): the event format, the response, and
the one tail loop both live views use (a lab run's chart, the mock interviewer's seat).

A view's generator replays what it needs from the DB, then reads the stream's new entries
with `StreamTail.read()` (XREAD BLOCK): `[]` after a quiet block, the entries otherwise. When
Redis fails, the tail says so once in the log, stops reading (`live` turns False) and
`read()` only waits `fallback_s`: the view then polls the DB, which holds everything the
stream carries. `keepalive()` is a comment every KEEPALIVE_EVERY quiet reads (~15 s at the
2 s block), so proxies keep an idle connection open.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import redis
from django.http import HttpRequest, StreamingHttpResponse

import common.redis

log = logging.getLogger(__name__)

BLOCK_MS = 2000  # XREAD BLOCK: a view re-checks the DB (status, an ended run) this often
KEEPALIVE_EVERY = 7  # quiet reads between keep-alive comments
KEEPALIVE = ": keep-alive\n\n"

Entry = tuple[bytes, dict[bytes, bytes]]  # (stream entry id, fields)


def event(name: str, data: dict[str, Any], event_id: int | None = None) -> str:
    """One SSE event; `event_id` (the `id:` line) is what the browser sends back as
    Last-Event-ID when it reconnects."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data)}\n\n"


def last_event_id(request: HttpRequest, default: int = -1) -> int:
    """The last event id the client saw (Last-Event-ID on a reconnect, or ?last_id=)."""
    raw = request.headers.get("Last-Event-ID") or request.GET.get("last_id") or str(default)
    try:
        return int(raw)
    except ValueError:
        return default


def response(events: AsyncIterator[str]) -> StreamingHttpResponse:
    """A text/event-stream response that no cache or proxy buffers."""
    out = StreamingHttpResponse(events, content_type="text/event-stream")
    out["Cache-Control"] = "no-cache"
    out["X-Accel-Buffering"] = "no"
    return out


class StreamTail:
    """Read one Redis stream from where it stood when `start()` was called, over a fresh
    asyncio client of its own (`async with` closes it).

    `label` names the stream in the log ("run 12", "mock 3"); `count` caps the entries per
    read; `fallback_s` is how long `read()` waits once Redis has failed (the view polls the
    DB at that pace)."""

    def __init__(self, key: str, *, label: str, count: int, fallback_s: float) -> None:
        self.key, self.label, self.count, self.fallback_s = key, label, count, fallback_s
        self.client = common.redis.async_client()
        self.cursor: bytes | None = None
        self.quiet = 0  # reads in a row that brought nothing

    async def __aenter__(self) -> StreamTail:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    @property
    def live(self) -> bool:
        """Whether the stream is still read (False once Redis failed: poll the DB)."""
        return self.cursor is not None

    async def start(self) -> None:
        """Where the stream stands now: entries from here on are new (call it before the
        view's DB catch-up, so nothing written between the two is missed)."""
        try:
            newest = await self.client.xrevrange(self.key, count=1)
            self.cursor = newest[0][0] if newest else b"0-0"
        except redis.RedisError:
            self.cursor = None  # no Redis: poll the DB instead

    async def read(self, block_ms: int = BLOCK_MS) -> list[Entry]:
        """The entries after the last one read, waiting up to `block_ms` for one."""
        entries: list[Entry] = []
        if self.cursor is not None:
            try:
                reply = await self.client.xread(
                    {self.key: self.cursor}, block=block_ms, count=self.count
                )
                entries = reply[0][1] if reply else []
            except redis.RedisError as exc:
                log.warning("%s: stream read failed, polling the DB: %s", self.label, exc)
                self.cursor = None
        else:
            await asyncio.sleep(self.fallback_s)
        if entries:
            self.cursor = entries[-1][0]
        self.quiet = 0 if entries else self.quiet + 1
        return entries

    def keepalive(self) -> str | None:
        """A keep-alive comment when this quiet spell reached a multiple of
        KEEPALIVE_EVERY reads, else None."""
        if self.quiet and self.quiet % KEEPALIVE_EVERY == 0:
            return KEEPALIVE
        return None
