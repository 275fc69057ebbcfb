"""Redis Streams for live lab runs: `lab:run:<id>` carries each point and status change.

The DB holds every point (durable); the stream only carries them to live viewers. Entries
are `{"kind": "point" | "status", "data": <json>, "t": <epoch ms>}`; point data carries its
`seq`, which is the SSE event id, so a viewer resumes after the last seq it drew whichever
source (stream or DB) replays it. `t` is when the worker wrote the entry (wall clock, 0.1 ms):
live point events carry it to the browser as `written_ms` (bench/web.py measures point
written -> point drawn with it). Streams are capped (MAXLEN ~) and expire a day after their
last write.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import redis
from django.conf import settings

MAXLEN = 10_000
TTL_S = 24 * 3600


def key(run_id: int) -> str:
    return f"lab:run:{run_id}"


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def client() -> redis.Redis:
    return _client(settings.REDIS_URL)


def publish(run_id: int, kind: str, data: dict[str, Any]) -> None:
    """Append one entry; failures are the caller's to log (the DB already has the data)."""
    pipe = client().pipeline(transaction=False)
    entry = {"kind": kind, "data": json.dumps(data), "t": f"{time.time() * 1000:.1f}"}
    pipe.xadd(key(run_id), entry, maxlen=MAXLEN)
    pipe.expire(key(run_id), TTL_S)
    pipe.execute()


def decode_entry(fields: dict[bytes, bytes]) -> tuple[str, dict[str, Any]]:
    return fields[b"kind"].decode(), json.loads(fields[b"data"])


def written_ms(fields: dict[bytes, bytes]) -> float | None:
    """When the worker wrote this entry (epoch ms), if it says."""
    raw = fields.get(b"t")
    return float(raw) if raw else None


def async_client():
    """A fresh asyncio client (one per SSE connection; closed by the caller). The read
    timeout stays above the SSE views' XREAD BLOCK (2 s): a Redis that stops answering
    without closing the socket makes the view fall back to the DB instead of hanging."""
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=6)
