"""GroupCommit: concurrent submits share a batch, each waiting loop is woken once per batch, a caller
cancelled before its batch is taken is left out, and a failing commit fails its requests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from genworker.group_commit import GroupCommit, Request

pytestmark = pytest.mark.anyio


class Recorder:
    """A commit that doubles each value, holding the first batch until `release` is set."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, batch: list[Request[int, int]]) -> list[Request[int, int]]:
        self.started.set()
        assert self.release.wait(30)
        self.batches.append([r.value for r in batch])
        for request in batch:
            if request.value < 0:
                request.future.set_exception(ValueError(f"bad value {request.value}"))
            else:
                request.future.set_result(request.value * 2)
        return []


async def test_queued_submits_share_one_batch_and_one_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    wakes = 0
    real = loop.call_soon_threadsafe

    def counting(*args: object, **kwargs: object) -> asyncio.Handle:
        nonlocal wakes
        wakes += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    commit = Recorder()
    group: GroupCommit[int, int] = GroupCommit(commit, name="test-group")
    first = asyncio.ensure_future(group.submit(0))
    assert await asyncio.to_thread(commit.started.wait, 30)  # the first batch is being committed
    wakes = 0  # to_thread itself woke the loop
    rest = [asyncio.ensure_future(group.submit(n)) for n in range(1, 50)]
    await asyncio.sleep(0)  # one loop turn: each task runs `submit` up to its await, so all are queued
    commit.release.set()
    assert await asyncio.gather(first, *rest) == [n * 2 for n in range(50)]
    assert commit.batches == [[0], list(range(1, 50))]
    assert wakes < 10  # one per batch (2), not one per request (50)


async def test_a_cancelled_caller_is_left_out_and_a_failure_reaches_its_caller() -> None:
    commit = Recorder()
    group: GroupCommit[int, int] = GroupCommit(commit, name="test-group")
    first = asyncio.ensure_future(group.submit(1))
    assert await asyncio.to_thread(commit.started.wait, 30)
    gone = asyncio.ensure_future(group.submit(2))
    bad = asyncio.ensure_future(group.submit(-3))
    await asyncio.sleep(0)
    gone.cancel()
    commit.release.set()
    assert await first == 2
    with pytest.raises(ValueError, match="bad value -3"):
        await bad
    assert gone.cancelled()
    assert commit.batches == [[1], [-3]]


def recording(threads: list[threading.Thread]) -> Callable[[list[Request[int, int]]], list[Request[int, int]]]:
    """A commit that answers each request with its value and notes the thread it ran in."""

    def commit(batch: list[Request[int, int]]) -> list[Request[int, int]]:
        threads.append(threading.current_thread())
        for request in batch:
            request.future.set_result(request.value)
        return []

    return commit


async def test_an_idle_drain_thread_serves_the_next_request_then_ends() -> None:
    threads: list[threading.Thread] = []
    group: GroupCommit[int, int] = GroupCommit(recording(threads), name="test-linger", linger_s=5)
    assert await group.submit(1) == 1
    assert await group.submit(2) == 2  # well within the linger: no new thread
    assert threads[0] is threads[1]
    await asyncio.to_thread(threads[0].join, 30)
    assert not threads[0].is_alive()
    assert await group.submit(3) == 3  # a new thread once the idle one has ended
    assert threads[2] is not threads[0]


async def test_close_ends_an_idle_drain_thread_at_once_and_a_later_request_still_works() -> None:
    threads: list[threading.Thread] = []
    group: GroupCommit[int, int] = GroupCommit(recording(threads), name="test-close", linger_s=3600)
    assert await group.submit(1) == 1
    group.close()
    await asyncio.to_thread(threads[0].join, 30)  # not an hour
    assert not threads[0].is_alive()
    assert await group.submit(2) == 2
