"""A per-thread Redis lock, so runtime processes sharing Redis never run one thread concurrently.

``SET key "{token}:{run_id}" NX PX ttl`` takes it; the holder renews it every ttl/3 and releases it
with a compare-and-delete script that also publishes on ``{key}:released``. Waiters sleep on that
channel, with a timeout of the lock's remaining time, so a crashed holder's lock is taken over as
soon as it expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final
from uuid import uuid4

from redis.asyncio import Redis
from redis.exceptions import RedisError

from genworker.ids import validate_id

__all__ = ["RedisThreadLock"]

log = logging.getLogger(__name__)

_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], '1')
    return 1
end
return 0
"""

_RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisThreadLock:
    def __init__(self, client: Redis, *, prefix: str = "genworker", ttl_ms: int = 30_000) -> None:
        if ttl_ms < 10:
            raise ValueError("ttl_ms must be at least 10")
        self._client = client
        self._prefix = prefix
        self._ttl_ms = ttl_ms
        self._release_script = client.register_script(_RELEASE)
        self._renew_script = client.register_script(_RENEW)

    def key(self, tenant_id: str, thread_id: str) -> str:
        return f"{self._prefix}:{validate_id(tenant_id, 'tenant id')}:thread-lock:{validate_id(thread_id, 'thread id')}"

    def channel(self, tenant_id: str, thread_id: str) -> str:
        return f"{self.key(tenant_id, thread_id)}:released"

    async def holder(self, tenant_id: str, thread_id: str) -> str | None:
        """The run id holding the thread in any process, or None."""
        value = await self._client.get(self.key(tenant_id, thread_id))
        return _text(value).partition(":")[2] if value is not None else None

    @contextlib.asynccontextmanager
    async def hold(self, tenant_id: str, thread_id: str, run_id: str) -> AsyncIterator[None]:
        key, channel = self.key(tenant_id, thread_id), self.channel(tenant_id, thread_id)
        token = f"{uuid4().hex}:{validate_id(run_id, 'run id')}"
        await self._acquire(key, channel, token)
        stop = asyncio.Event()
        renewer = asyncio.create_task(self._renew(key, token, stop))
        try:
            yield
        finally:
            stop.set()
            await asyncio.gather(renewer, return_exceptions=True)
            try:
                await asyncio.shield(self._release_script(keys=[key], args=[token, channel]))
            except RedisError as exc:
                log.warning("could not release thread lock %s (it expires by itself): %s", key, exc)

    async def _try(self, key: str, token: str) -> bool:
        return bool(await self._client.set(key, token, nx=True, px=self._ttl_ms))

    async def _acquire(self, key: str, channel: str, token: str) -> None:
        if await self._try(key, token):
            return
        pubsub = self._client.pubsub()
        try:
            await pubsub.subscribe(channel)  # before the next attempt, so no release goes unnoticed
            while not await self._try(key, token):
                remaining_ms = int(await self._client.pttl(key))  # -2: just released, -1: no expiry
                if remaining_ms == -2:
                    continue
                wait_ms = min(remaining_ms, self._ttl_ms) + 5 if remaining_ms >= 0 else self._ttl_ms
                await pubsub.get_message(ignore_subscribe_messages=True, timeout=wait_ms / 1000)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _renew(self, key: str, token: str, stop: asyncio.Event) -> None:
        every_s = self._ttl_ms / 3 / 1000
        while True:
            try:
                async with asyncio.timeout(every_s):
                    await stop.wait()
                return
            except TimeoutError:
                pass
            try:
                if not await self._renew_script(keys=[key], args=[token, self._ttl_ms]):
                    log.error("thread lock %s was lost before the run finished (expired or taken over)", key)
                    return
            except RedisError as exc:
                log.warning("could not renew thread lock %s: %s", key, exc)
