"""Live typing for the interviewer seat: a Redis Stream `mock:<id>:live` per mock.

An autosave or an answer appends `{"kind": "answer", "data": {item, slot}}`: a notice that
this box changed, never the text (the DB holds every draft; the interviewer's stream reads
the text from it). Item changes append `item`, the end appends `end`.

Bounded by construction (a hostile learner used to put 2 MB per autosave here, ~4 GB per
mock at MAXLEN): an entry is a few dozen bytes whatever was typed, and answer notices are
coalesced to at most one per box per `COALESCE_MS` (SET NX PX gate). A save coalesced away
still reaches the interviewer: the stream view reads the DB again `COALESCE_MS` (+ margin)
after the last notice it got, and every `RESYNC_EVERY` quiet reads anyway (see
mock/interviewer_views.py). Every Redis error here is logged, never raised: with Redis full
(`maxmemory`, policy `noeviction`) or down, the learner's save still succeeds.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

import common.redis

log = logging.getLogger(__name__)
MAXLEN = 2_000
TTL_S = 24 * 3600
COALESCE_MS = 1_000  # at most one answer notice per box per second (latest wins: see above)


def key(mock_id: int) -> str:
    return f"mock:{mock_id}:live"


def gate_key(mock_id: int, item: int, slot: str) -> str:
    return f"mock:{mock_id}:gate:{item}:{slot}"


def _append(mock_id: int, kind: str, data: dict[str, Any]) -> None:
    pipe = common.redis.client().pipeline(transaction=False)
    pipe.xadd(key(mock_id), {"kind": kind, "data": json.dumps(data)}, maxlen=MAXLEN)
    pipe.expire(key(mock_id), TTL_S)
    pipe.execute()


def publish(mock_id: int, kind: str, data: dict[str, Any]) -> None:
    """Append one entry (`item`, `end`); a Redis failure is logged, never raised."""
    try:
        _append(mock_id, kind, data)
    except redis.RedisError as exc:
        log.warning("mock %s: live publish failed: %s", mock_id, exc)


def publish_answer(mock_id: int, item: int, slot: str) -> bool:
    """Tell the interviewer's stream that box (`item`, `slot`) changed: at most one notice
    per box per COALESCE_MS. Call it after the text is committed to the DB. Returns whether
    a notice was appended (False: coalesced, or Redis refused; the DB has the text)."""
    try:
        if not common.redis.client().set(gate_key(mock_id, item, slot), 1, nx=True, px=COALESCE_MS):
            return False  # one went out less than a second ago: the reader re-reads the DB
        _append(mock_id, "answer", {"item": item, "slot": slot})
        return True
    except redis.RedisError as exc:  # e.g. OOM under maxmemory + noeviction, or Redis down
        log.warning("mock %s: live publish failed: %s", mock_id, exc)
        return False


def stamp_ms(when) -> int:
    """When a text was saved (epoch ms): the page keeps the newest text per box, so an
    event older than the text it already drew cannot overwrite it."""
    return int(when.timestamp() * 1000) if when else 0


def decode_entry(fields: dict[bytes, bytes]) -> tuple[str, dict[str, Any]]:
    return fields[b"kind"].decode(), json.loads(fields[b"data"])
