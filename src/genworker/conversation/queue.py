"""Per-thread FIFO turns: one run at a time per (tenant, thread), later messages wait in order.

Within a process the order is strictly FIFO and different threads never wait for each other.
Given a Redis client, a turn also holds the thread's `RedisThreadLock`, so processes sharing Redis
never run the same thread concurrently (across processes the order is whoever takes the lock first).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis

from genworker.conversation.redis_lock import RedisThreadLock
from genworker.ids import validate_id

__all__ = ["QueueStatus", "ThreadQueue"]


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """`running`: the run holding the thread (in any process, with Redis); `waiting`: this process's queue."""

    running: str | None
    waiting: tuple[str, ...]


@dataclass(eq=False, slots=True)
class _Waiter:
    run_id: str
    turn: asyncio.Future[None]


@dataclass(eq=False, slots=True)
class _Line:
    running: str
    holds_lock: bool = False  # False while the local head still waits for the Redis lock
    waiting: deque[_Waiter] = field(default_factory=deque)


class ThreadQueue:
    def __init__(self, redis: Redis | None = None, *, prefix: str = "genworker", lock_ttl_ms: int = 30_000) -> None:
        self._lock = RedisThreadLock(redis, prefix=prefix, ttl_ms=lock_ttl_ms) if redis is not None else None
        self._lines: dict[tuple[str, str], _Line] = {}

    @contextlib.asynccontextmanager
    async def turn(self, tenant_id: str, thread_id: str, run_id: str) -> AsyncIterator[None]:
        """Wait for the thread's turn, then hold it for the body. Cancelling a waiter removes it."""
        key = (validate_id(tenant_id, "tenant id"), validate_id(thread_id, "thread id"))
        validate_id(run_id, "run id")
        line = await self._enter(key, run_id)
        try:
            if self._lock is None:
                line.holds_lock = True
                yield
            else:
                async with self._lock.hold(tenant_id, thread_id, run_id):
                    line.holds_lock = True
                    yield
        finally:
            self._leave(key)

    async def status(self, tenant_id: str, thread_id: str) -> QueueStatus:
        key = (validate_id(tenant_id, "tenant id"), validate_id(thread_id, "thread id"))
        line = self._lines.get(key)
        waiting = [w.run_id for w in line.waiting] if line else []
        if line is not None and not line.holds_lock:
            waiting.insert(0, line.running)
        if self._lock is not None:
            running = await self._lock.holder(tenant_id, thread_id)
        else:
            running = line.running if line is not None else None
        return QueueStatus(running, tuple(waiting))

    async def _enter(self, key: tuple[str, str], run_id: str) -> _Line:
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line(run_id)
            return line
        waiter = _Waiter(run_id, asyncio.get_running_loop().create_future())
        line.waiting.append(waiter)
        try:
            await waiter.turn
        except asyncio.CancelledError:
            if waiter.turn.done() and not waiter.turn.cancelled():
                self._leave(key)  # the turn was handed over just as we were cancelled: pass it on
            elif waiter in line.waiting:
                line.waiting.remove(waiter)
            raise
        return line

    def _leave(self, key: tuple[str, str]) -> None:
        line = self._lines[key]
        while line.waiting:
            waiter = line.waiting.popleft()
            if not waiter.turn.done():
                line.running, line.holds_lock = waiter.run_id, False
                waiter.turn.set_result(None)
                return
        del self._lines[key]
