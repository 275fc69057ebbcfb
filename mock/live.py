"""Live typing for the interviewer seat: a Redis Stream `mock:<id>:live` per mock.

The candidate's autosave appends `{"kind": "answer", "data": {item, slot, text}}`; item
changes append `item`, the end appends `end`. The DB holds every draft (durable); the
stream only carries them to a watching interviewer, who first gets a snapshot from the DB.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis

log = logging.getLogger(__name__)
MAXLEN = 2_000
TTL_S = 24 * 3600


def key(mock_id: int) -> str:
    return f"mock:{mock_id}:live"


def publish(mock_id: int, kind: str, data: dict[str, Any]) -> None:
    """Append one entry; a Redis failure is logged, never raised (the DB has the text)."""
    from lab import streams  # the project's one Redis client (settings.REDIS_URL)

    try:
        pipe = streams.client().pipeline(transaction=False)
        pipe.xadd(key(mock_id), {"kind": kind, "data": json.dumps(data)}, maxlen=MAXLEN)
        pipe.expire(key(mock_id), TTL_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("mock %s: live publish failed: %s", mock_id, exc)


def now_ms() -> int:
    """When a text was saved (epoch ms): the page keeps the newest text per box, so an
    entry older than the DB snapshot it already drew cannot overwrite it."""
    return time.time_ns() // 1_000_000


def stamp_ms(when) -> int:
    return int(when.timestamp() * 1000) if when else 0


def decode_entry(fields: dict[bytes, bytes]) -> tuple[str, dict[str, Any]]:
    return fields[b"kind"].decode(), json.loads(fields[b"data"])
