"""The project's one Redis client (settings.REDIS_URL): a shared synchronous client, a fresh
asyncio client per SSE connection, and a PING that never raises."""

from __future__ import annotations

import functools

import redis
from django.conf import settings


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)


def client() -> redis.Redis:
    return _client(settings.REDIS_URL)


def async_client():
    """A fresh asyncio client (one per SSE connection; closed by the caller). The read
    timeout stays above the SSE views' XREAD BLOCK (2 s): a Redis that stops answering
    without closing the socket makes the view fall back to the DB instead of hanging."""
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=6)


def ping(url: str, timeout_s: float = 1.0) -> bool:
    """True when a Redis server answers PING at `url` (redis-py form: redis:// or unix://)."""
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
