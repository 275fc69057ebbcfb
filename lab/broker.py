"""What the lab keeps in Redis: the live stream of each run, and the Celery queues.

Streams: `lab:run:<id>` carries each point and status change. The DB holds every point
(durable); the stream only carries them to live viewers. Entries are `{"kind": "point" |
"status", "data": <json>, "t": <epoch ms>}`; point data carries its `seq`, which is the SSE
event id, so a viewer resumes after the last seq it drew whichever source (stream or DB)
replays it. `t` is when the worker wrote the entry (wall clock, 0.1 ms): live point events
carry it to the browser as `written_ms` (bench/web.py measures point written -> point drawn
with it). Streams are capped (MAXLEN ~) and expire a day after their last write.

Queues: a run's message goes to `lab-cpu` or `lab-gpu` by task name (the worker side is
lab/tasks.py); the broker is asked which messages it still holds and which workers answer.
The Celery app is the current one (trainer/celery.py makes it): nothing here imports it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis
from celery import current_app
from django.conf import settings

import common.redis

log = logging.getLogger(__name__)

MAXLEN = 10_000
TTL_S = 24 * 3600
BROKER_PING_TIMEOUT_S = 2.0
RUN_TASKS = {"lab-cpu": "lab.tasks.run_lab_cpu", "lab-gpu": "lab.tasks.run_lab_gpu"}


# ---------------------------------------------------------------- streams


def stream_key(run_id: int) -> str:
    return f"lab:run:{run_id}"


def publish(run_id: int, kind: str, data: dict[str, Any]) -> None:
    """Append one entry; a Redis failure is logged, never raised (the DB has the data; live
    viewers fall back to polling it)."""
    entry = {"kind": kind, "data": json.dumps(data), "t": f"{time.time() * 1000:.1f}"}
    try:
        pipe = common.redis.client().pipeline(transaction=False)
        pipe.xadd(stream_key(run_id), entry, maxlen=MAXLEN)
        pipe.expire(stream_key(run_id), TTL_S)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("lab run %s: could not stream a %s entry: %s", run_id, kind, exc)


def clear_stream(run_id: int) -> None:
    """Drop any stream left under this run's key (a database reset reuses run ids)."""
    try:
        common.redis.client().delete(stream_key(run_id))
    except redis.RedisError as exc:
        log.warning("lab run %s: could not clear its stream: %s", run_id, exc)


def decode_entry(fields: dict[bytes, bytes]) -> tuple[str, dict[str, Any]]:
    return fields[b"kind"].decode(), json.loads(fields[b"data"])


def written_ms(fields: dict[bytes, bytes]) -> float | None:
    """When the worker wrote this entry (epoch ms), if it says."""
    raw = fields.get(b"t")
    return float(raw) if raw else None


# ---------------------------------------------------------------- queues


def reachable() -> bool:
    """Whether the broker (Redis) answers PING within BROKER_PING_TIMEOUT_S."""
    return common.redis.ping(settings.REDIS_URL, timeout_s=BROKER_PING_TIMEOUT_S)


def enqueue(*, run_id: int, task_id: str, queue: str, time_limit_s: int) -> None:
    """Send a run's message to `queue` (lab-cpu or lab-gpu) under the run's task id. One
    attempt (no publish retries): each wait on the socket ends after
    settings.BROKER_SOCKET_TIMEOUT_S, and a refusal raises."""
    current_app.send_task(
        RUN_TASKS[queue],
        args=[run_id],
        task_id=task_id,
        queue=queue,
        soft_time_limit=time_limit_s,
        time_limit=time_limit_s + 30,
        retry=False,
        ignore_result=False,  # as the task's own apply_async sends it
    )


def revoke(task_id: str) -> None:
    current_app.control.revoke(task_id)


def _message_task_id(raw: bytes | str | dict) -> str | None:
    message = json.loads(raw) if isinstance(raw, (bytes, str)) else raw
    headers = message.get("headers") or {}
    return headers.get("id") or (message.get("properties") or {}).get("correlation_id")


def task_ids_in_broker(queues: set[str]) -> set[str] | None:
    """Task ids of every message the broker still holds for `queues`: waiting in a queue, or
    delivered to a worker and not yet acknowledged (kombu's Redis transport keeps those in
    its `unacked` hash until the ack). None when the broker is not Redis (unknown)."""
    with current_app.connection_for_write() as conn:
        channel = conn.default_channel
        if not hasattr(channel, "unacked_key"):
            return None
        client = channel.client
        ids: set[str | None] = set()
        for queue in queues:
            for priority in channel.priority_steps:
                for raw in client.lrange(channel._q_for_pri(queue, priority), 0, -1):
                    ids.add(_message_task_id(raw))
        for raw in client.hvals(channel.unacked_key):
            ids.add(_message_task_id(json.loads(raw)[0]))  # [message, exchange, routing key]
    ids.discard(None)
    return ids


def workers_online(timeout: float = 1.0) -> list[dict[str, Any]]:
    """Workers answering a broadcast now, with the queues they consume (cached 10 s)."""
    from django.core.cache import cache

    cached = cache.get("lab:workers")
    if cached is not None:
        return cached
    try:
        replies = current_app.control.inspect(timeout=timeout).active_queues() or {}
        active = current_app.control.inspect(timeout=timeout).active() or {}
    except Exception as exc:  # broker down: say so rather than crash the page
        log.warning("could not inspect workers: %s", exc)
        return []
    workers = [
        {
            "name": name,
            "queues": sorted(q["name"] for q in queues),
            "active": len(active.get(name, [])),
        }
        for name, queues in sorted(replies.items())
    ]
    cache.set("lab:workers", workers, 10)
    return workers
