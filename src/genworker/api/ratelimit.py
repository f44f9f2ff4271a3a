"""Sliding-window rate limits for the API's unauthenticated routes.

`RateLimiter` counts in this process's memory (the files profile: one process). `RedisRateLimiter`
counts in Redis (the shared profile), so every process sharing the Redis shares one limit: one Lua
script per hit trims the key's window, counts it and adds the hit, atomically, on Redis's clock. While
Redis cannot be reached it counts in this process, and says so in the log.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

__all__ = ["Limiter", "RateLimiter", "RedisRateLimiter", "per_client_and_worker"]

log = logging.getLogger("genworker.api")

_MAX_KEYS = 10_000  # above this, keys idle for a whole window are forgotten


class Limiter(Protocol):
    async def check(self, key: Sequence[str]) -> int | None:
        """Count a hit for `key`: None when it is allowed, else the whole seconds until one would be."""
        ...


class RateLimiter:
    """At most `limit` hits per key within any `window_s` seconds (in this process)."""

    def __init__(self, limit: int, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError("a rate limit needs limit >= 1 and window_s > 0")
        self.limit, self.window_s, self.clock = limit, window_s, clock
        self._hits: dict[Hashable, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: Hashable) -> int | None:
        """Count a hit for `key`: None when it is allowed, else the whole seconds until one would be."""
        now = self.clock()
        with self._lock:
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= now - self.window_s:
                hits.popleft()
            if len(hits) >= self.limit:
                return max(1, math.ceil(hits[0] + self.window_s - now))
            hits.append(now)
            if len(self._hits) > _MAX_KEYS:
                self._forget(now)
            return None

    async def check(self, key: Sequence[str]) -> int | None:
        return self.hit(tuple(key))

    def _forget(self, now: float) -> None:
        for key in [k for k, hits in self._hits.items() if not hits or hits[-1] <= now - self.window_s]:
            del self._hits[key]


# KEYS[1]: the window's sorted set; ARGV: limit, window (ms), a unique member. Returns -1 when the hit
# counts, else the milliseconds until the oldest hit leaves the window.
_SLIDING_WINDOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return tonumber(oldest[2]) + window - now
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return -1
"""


class RedisRateLimiter:
    """At most `limit` hits per key within any `window_s` seconds, across every process on `client`
    (an async redis client): keys `{prefix}:ratelimit:{name}:{key parts joined by '|'}`."""

    def __init__(self, client: Any, name: str, limit: int, window_s: float, *, prefix: str = "gw") -> None:
        if limit < 1 or window_s <= 0:
            raise ValueError("a rate limit needs limit >= 1 and window_s > 0")
        self.client, self.name, self.limit, self.window_s, self.prefix = client, name, limit, window_s, prefix
        self._script = client.register_script(_SLIDING_WINDOW)
        self._local = RateLimiter(limit, window_s)  # while Redis cannot be reached
        self._unreachable = False

    def key(self, key: Sequence[str]) -> str:
        return f"{self.prefix}:ratelimit:{self.name}:{'|'.join(key)}"

    async def check(self, key: Sequence[str]) -> int | None:
        from redis.exceptions import RedisError

        window_ms = math.ceil(self.window_s * 1000)
        try:
            wait_ms = int(await self._script(keys=[self.key(key)], args=[self.limit, window_ms, uuid.uuid4().hex]))
        except RedisError as exc:
            if not self._unreachable:
                log.warning("[RateLimit] %s: Redis unreachable (%s): counting in this process", self.name, exc)
            self._unreachable = True
            return self._local.hit(tuple(key))
        if self._unreachable:
            log.warning("[RateLimit] %s: Redis reachable again", self.name)
            self._unreachable = False
        return None if wait_ms < 0 else max(1, math.ceil(wait_ms / 1000))


def per_client_and_worker(redis: Any | None, per_client: int, per_worker: int) -> tuple[Limiter, Limiter]:
    """The anonymous service route's two limits a minute: one client address to one worker, and the
    worker from everyone; in Redis when the runtime has an async client (the shared profile)."""
    if redis is None:
        return RateLimiter(per_client, 60), RateLimiter(per_worker, 60)
    client = RedisRateLimiter(redis, "service-client", per_client, 60)
    return client, RedisRateLimiter(redis, "service-worker", per_worker, 60)
