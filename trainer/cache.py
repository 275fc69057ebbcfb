"""The cache behind the rate limits: Django's Redis cache, failing open when Redis is down.

Why Redis and not Django's DatabaseCache: the counters must be shared by every uvicorn
worker process, and django-ratelimit counts with `cache.add` + `cache.incr`. Redis INCR is
atomic; DatabaseCache's incr is a read then a write (django-ratelimit's own system check
rejects it, E003 "does not support atomic increment"), so two workers counting at once
lose increments, and it would add two database writes to every limited request (SQLite
serialises writers). Redis is already required (Celery broker, lab streams).

Why fail open: when Redis is down the trainer must keep working (the database holds every
answer; the lab and the interviewer seat fall back to polling it). A rate limit that
cannot count lets the request through (RATELIMIT_FAIL_OPEN) instead of refusing everyone;
each failure is logged, and Redis is not asked again for `RETRY_AFTER_S` seconds, so an
outage costs one connection attempt per process every few seconds, not one per request.
"""

from __future__ import annotations

import logging
import time
from typing import ClassVar

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache
from django.core.exceptions import ImproperlyConfigured
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


class FailOpenRedisCache(RedisCache):
    """add/incr/get/... answer "no value" instead of raising when Redis is unreachable."""

    RETRY_AFTER_S = 5.0
    # Per process (each thread has its own cache object): location -> monotonic time until
    # which Redis is skipped after a failure.
    _down_until: ClassVar[dict[str, float]] = {}

    def __init__(self, server, params):
        super().__init__(server, params)
        if not self.key_prefix:
            raise ImproperlyConfigured("FailOpenRedisCache needs a KEY_PREFIX (clear() uses it)")

    def _location(self) -> str:
        return ",".join(self._servers)

    def _guarded(self, call, fallback):
        location = self._location()
        if time.monotonic() < self._down_until.get(location, 0.0):
            return fallback
        try:
            return call()
        except RedisError as exc:
            log.warning(
                "rate-limit cache %s unreachable (%s: %s): limits are off for %.0f s",
                location,
                type(exc).__name__,
                exc,
                self.RETRY_AFTER_S,
            )
            self._down_until[location] = time.monotonic() + self.RETRY_AFTER_S
            return fallback

    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        return self._guarded(lambda: RedisCache.add(self, key, value, timeout, version), False)

    def incr(self, key, delta=1, version=None):
        # None makes django-ratelimit fail open (RATELIMIT_FAIL_OPEN = True).
        return self._guarded(lambda: RedisCache.incr(self, key, delta, version), None)

    def get(self, key, default=None, version=None):
        return self._guarded(lambda: RedisCache.get(self, key, default, version), default)

    def delete(self, key, version=None):
        return self._guarded(lambda: RedisCache.delete(self, key, version), False)

    def clear(self) -> bool:
        """Delete this cache's keys only. Django's RedisCache.clear() is FLUSHDB, which
        would also wipe the Celery queues and lab streams kept in the same database."""
        self._down_until.pop(self._location(), None)
        try:
            client = self._cache.get_client(None, write=True)
            keys = list(client.scan_iter(match=f"{self.key_prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
        except RedisError:
            return False  # nothing to clear; the next count logs the outage
        return True
