"""ThreadQueue over real Redis: two queue objects stand for two runtime processes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from genworker.conversation import QueueStatus, RedisThreadLock, ThreadQueue

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

TIMEOUT = 5


class Shared:
    def __init__(self, url: str, prefix: str) -> None:
        self.url, self.prefix = url, prefix
        self.clients: list[Redis] = []

    def client(self) -> Redis:
        self.clients.append(Redis.from_url(self.url))
        return self.clients[-1]

    def process(self, lock_ttl_ms: int = 30_000) -> ThreadQueue:
        """A queue with its own connection, as another runtime process would have."""
        return ThreadQueue(self.client(), prefix=self.prefix, lock_ttl_ms=lock_ttl_ms)

    def lock(self) -> RedisThreadLock:
        return RedisThreadLock(self.client(), prefix=self.prefix)


@pytest.fixture
async def shared(redis_url: str) -> AsyncIterator[Shared]:
    prefix = f"gwtest-{uuid.uuid4().hex}"
    env = Shared(redis_url, prefix)
    admin = env.client()
    try:
        yield env
    finally:
        keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
        if keys:
            await admin.delete(*keys)
        for client in env.clients:
            await client.aclose()


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Re-run a Redis query until it holds; each round trip yields to the loop (no sleeps)."""
    async with asyncio.timeout(TIMEOUT):
        while not await check():
            pass


async def subscribers(client: Redis, channel: str) -> int:
    [(_, count)] = await client.pubsub_numsub(channel)
    return int(count)


async def test_two_processes_never_run_the_same_thread_together(shared: Shared) -> None:
    one, two = shared.process(), shared.process()
    lock, admin = shared.lock(), shared.client()
    log: list[str] = []
    release_a, entered_a, entered_b = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def run_a() -> None:
        async with one.turn("acme", "t1", "ra"):
            log.append("a-start")
            entered_a.set()
            await release_a.wait()
            log.append("a-end")

    async def run_b() -> None:
        async with two.turn("acme", "t1", "rb"):
            log.append("b-start")
            entered_b.set()

    task_a = asyncio.create_task(run_a())
    await asyncio.wait_for(entered_a.wait(), TIMEOUT)
    task_b = asyncio.create_task(run_b())
    await eventually(lambda: _subscribed(admin, lock.channel("acme", "t1")))  # b waits on Redis now
    assert not entered_b.is_set()
    assert await two.status("acme", "t1") == QueueStatus("ra", ("rb",))
    assert await one.status("acme", "t1") == QueueStatus("ra", ())
    release_a.set()
    await asyncio.wait_for(asyncio.gather(task_a, task_b), TIMEOUT)
    assert log == ["a-start", "a-end", "b-start"]
    assert await lock.holder("acme", "t1") is None
    assert await two.status("acme", "t1") == QueueStatus(None, ())


async def _subscribed(client: Redis, channel: str) -> bool:
    return await subscribers(client, channel) >= 1


async def test_other_threads_are_not_blocked_across_processes(shared: Shared) -> None:
    one, two = shared.process(), shared.process()
    async with one.turn("acme", "t1", "ra"), asyncio.timeout(TIMEOUT), two.turn("acme", "t2", "rb"):
        assert await one.status("acme", "t2") == QueueStatus("rb", ())


async def test_a_crashed_holders_lock_expires(shared: Shared) -> None:
    lock, admin = shared.lock(), shared.client()
    await admin.set(lock.key("acme", "t1"), "deadbeef:crashed", px=150)  # a holder that will never release
    queue = shared.process()
    assert await queue.status("acme", "t1") == QueueStatus("crashed", ())
    async with asyncio.timeout(TIMEOUT), queue.turn("acme", "t1", "r2"):
        assert await lock.holder("acme", "t1") == "r2"
    assert await lock.holder("acme", "t1") is None


async def test_the_holder_renews_its_lock(shared: Shared) -> None:
    queue, lock, admin = shared.process(lock_ttl_ms=600), shared.lock(), shared.client()
    key = lock.key("acme", "t1")
    async with queue.turn("acme", "t1", "r1"):
        await admin.pexpire(key, 450)  # the renewal, every 200 ms, must push it back up to 600
        await eventually(lambda: _pttl_above(admin, key, 500))
        assert await lock.holder("acme", "t1") == "r1"
    assert await admin.exists(key) == 0


async def _pttl_above(client: Redis, key: str, floor_ms: int) -> bool:
    return int(await client.pttl(key)) > floor_ms


async def test_a_release_never_deletes_someone_elses_lock(shared: Shared) -> None:
    queue, lock, admin = shared.process(), shared.lock(), shared.client()
    key = lock.key("acme", "t1")
    with pytest.raises(RuntimeError):
        async with queue.turn("acme", "t1", "r1"):
            await admin.set(key, "other:r9")  # r1's lock expired and r9 took over
            raise RuntimeError("boom")
    assert await lock.holder("acme", "t1") == "r9"
