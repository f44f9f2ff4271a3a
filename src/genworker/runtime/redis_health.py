"""Whether the shared profile's Redis can be reached (issue #30, docs/deploy.md#redis-faults).

Before the runtime starts, `genworker run` waits until `unreachable(url)` is None (cli/serve.py):
the shared profile never starts on the single-process file backends. While it runs, `RedisWatch`
pings Redis every second on a client of its own; while it cannot, /readiness answers 503
`redis_unavailable` and requests that would start work are refused with that code (api/app.py).
The clients the services use reconnect by themselves once Redis answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import redis

__all__ = ["REDIS_UNAVAILABLE", "RedisWatch", "ping", "safe_url", "unreachable"]

log = logging.getLogger("genworker.runtime")

REDIS_UNAVAILABLE: Final = "redis_unavailable"
TIMEOUT_S: Final = 2.0  # connect and reply: a Redis that takes longer is down for the runtime's purposes


def safe_url(url: str) -> str:
    """The URL without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def client_for(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=TIMEOUT_S, socket_timeout=TIMEOUT_S)


def ping(client: redis.Redis, url: str) -> str | None:
    """None when `client` answers PING; else why not, naming `url` without its password. Blocking."""
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"cannot reach {safe_url(url)}: {exc}"
    return None


def unreachable(url: str) -> str | None:
    """`ping` on a client of its own, closed after. Blocking."""
    client = client_for(url)
    try:
        return ping(client, url)
    finally:
        client.close()


class RedisWatch:
    """Pings Redis every `interval_s`; `down` says why it cannot be reached (None: it can)."""

    def __init__(self, url: str, interval_s: float = 1.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.down: str | None = None

    async def run(self, stop: asyncio.Event) -> None:
        client = client_for(self.url)
        try:
            while not stop.is_set():
                why = await asyncio.to_thread(ping, client, self.url)
                if why is not None and self.down is None:
                    log.error("[Runtime] %s: not ready, new work refused until it answers again", why)
                elif why is None and self.down is not None:
                    log.warning("[Runtime] Redis at %s answers again: ready", safe_url(self.url))
                self.down = why
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.interval_s)
        finally:
            await asyncio.to_thread(client.close)
