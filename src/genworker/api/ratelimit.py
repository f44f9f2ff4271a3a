"""A sliding-window rate limiter for the API's unauthenticated routes (in this process's memory:
behind a load balancer each process counts its own share)."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable

__all__ = ["RateLimiter"]

_MAX_KEYS = 10_000  # above this, keys idle for a whole window are forgotten


class RateLimiter:
    """At most `limit` hits per key within any `window_s` seconds."""

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

    def _forget(self, now: float) -> None:
        for key in [k for k, hits in self._hits.items() if not hits or hits[-1] <= now - self.window_s]:
            del self._hits[key]
