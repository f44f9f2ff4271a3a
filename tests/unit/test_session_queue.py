"""ThreadQueue in one process: strict FIFO per thread, threads in parallel, cancellation, status."""

from __future__ import annotations

import asyncio

import pytest

from genworker.conversation import QueueStatus, ThreadQueue
from genworker.ids import InvalidIdError

pytestmark = pytest.mark.anyio

TIMEOUT = 5


class Log:
    """Who entered, in order, and the most runs ever inside one thread at once."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.inside = 0
        self.most_inside = 0


class Run:
    """One run on a thread: `queued` is set just before it asks for the turn, `entered` inside it,
    and it leaves when `release` is set."""

    def __init__(self, queue: ThreadQueue, run_id: str, thread_id: str = "t1", tenant_id: str = "acme") -> None:
        self.queue, self.run_id, self.thread_id, self.tenant_id = queue, run_id, thread_id, tenant_id
        self.queued, self.entered, self.release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def body(self, log: Log) -> None:
        self.queued.set()  # the turn is requested before this task next yields
        async with self.queue.turn(self.tenant_id, self.thread_id, self.run_id):
            log.entered.append(self.run_id)
            log.inside += 1
            log.most_inside = max(log.most_inside, log.inside)
            self.entered.set()
            try:
                await self.release.wait()
            finally:
                log.inside -= 1

    async def start(self, log: Log) -> Run:
        self.task = asyncio.create_task(self.body(log))
        await asyncio.wait_for(self.queued.wait(), TIMEOUT)
        return self

    async def finish(self) -> None:
        self.release.set()
        assert self.task is not None
        await asyncio.wait_for(self.task, TIMEOUT)


async def test_waiters_run_strictly_in_arrival_order() -> None:
    queue = ThreadQueue()
    log = Log()
    runs = [await Run(queue, f"r{i}").start(log) for i in range(1, 6)]
    await asyncio.wait_for(runs[0].entered.wait(), TIMEOUT)
    assert await queue.status("acme", "t1") == QueueStatus("r1", ("r2", "r3", "r4", "r5"))
    for i, run in enumerate(runs):
        assert all(not later.entered.is_set() for later in runs[i + 1 :])
        await run.finish()
        if i + 1 < len(runs):
            await asyncio.wait_for(runs[i + 1].entered.wait(), TIMEOUT)
            waiting = tuple(r.run_id for r in runs[i + 2 :])
            assert await queue.status("acme", "t1") == QueueStatus(runs[i + 1].run_id, waiting)
    assert log.entered == ["r1", "r2", "r3", "r4", "r5"]
    assert log.most_inside == 1  # never two runs on the thread at once
    assert await queue.status("acme", "t1") == QueueStatus(None, ())


async def test_a_late_arrival_queues_behind_existing_waiters() -> None:
    queue = ThreadQueue()
    log = Log()
    first, second = await Run(queue, "r1").start(log), await Run(queue, "r2").start(log)
    await first.finish()
    await asyncio.wait_for(second.entered.wait(), TIMEOUT)
    third = await Run(queue, "r3").start(log)  # arrives while r2 runs
    assert await queue.status("acme", "t1") == QueueStatus("r2", ("r3",))
    await second.finish()
    await third.finish()
    assert log.entered == ["r1", "r2", "r3"]


async def test_different_threads_and_tenants_do_not_wait_for_each_other() -> None:
    queue = ThreadQueue()
    log = Log()
    busy = await Run(queue, "r1", "t1").start(log)
    await asyncio.wait_for(busy.entered.wait(), TIMEOUT)
    other_thread = await Run(queue, "r2", "t2").start(log)
    other_tenant = await Run(queue, "r3", "t1", tenant_id="globex").start(log)
    await asyncio.wait_for(other_thread.entered.wait(), TIMEOUT)
    await asyncio.wait_for(other_tenant.entered.wait(), TIMEOUT)
    assert await queue.status("acme", "t2") == QueueStatus("r2", ())
    for run in (other_thread, other_tenant, busy):
        await run.finish()
    assert await queue.status("acme", "t1") == QueueStatus(None, ())


async def test_cancelling_a_waiter_removes_it() -> None:
    queue = ThreadQueue()
    log = Log()
    runs = [await Run(queue, f"r{i}").start(log) for i in (1, 2, 3)]
    assert runs[1].task is not None
    runs[1].task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(runs[1].task, TIMEOUT)
    assert await queue.status("acme", "t1") == QueueStatus("r1", ("r3",))
    await runs[0].finish()
    await runs[2].finish()
    assert log.entered == ["r1", "r3"]


async def test_cancelled_just_after_being_handed_the_turn_passes_it_on() -> None:
    queue = ThreadQueue()
    log = Log()
    handed_over = asyncio.Event()
    second, third = Run(queue, "r2"), Run(queue, "r3")

    async def first_then_cancel_second() -> None:
        async with queue.turn("acme", "t1", "r1"):
            await second.start(log)
            await third.start(log)
        assert second.task is not None
        second.task.cancel()  # r2 has the turn but has not resumed yet
        handed_over.set()

    await asyncio.wait_for(first_then_cancel_second(), TIMEOUT)
    await asyncio.wait_for(handed_over.wait(), TIMEOUT)
    await asyncio.wait_for(third.entered.wait(), TIMEOUT)
    assert log.entered == ["r3"] and not second.entered.is_set()
    await third.finish()
    assert second.task is not None and second.task.cancelled()
    assert await queue.status("acme", "t1") == QueueStatus(None, ())


async def test_a_failing_or_cancelled_holder_releases_the_turn() -> None:
    queue = ThreadQueue()
    with pytest.raises(RuntimeError):
        async with queue.turn("acme", "t1", "r1"):
            raise RuntimeError("boom")
    log = Log()
    holder = await Run(queue, "r2").start(log)
    waiter = await Run(queue, "r3").start(log)
    await asyncio.wait_for(holder.entered.wait(), TIMEOUT)
    assert holder.task is not None
    holder.task.cancel()
    await asyncio.wait_for(waiter.entered.wait(), TIMEOUT)
    await waiter.finish()
    assert log.entered == ["r2", "r3"]


@pytest.mark.parametrize(("tenant", "thread", "run"), [("../x", "t1", "r1"), ("acme", "a/b", "r1"), ("acme", "t", "")])
async def test_ids_are_validated(tenant: str, thread: str, run: str) -> None:
    with pytest.raises(InvalidIdError):
        async with ThreadQueue().turn(tenant, thread, run):
            pass
