"""TokenCache: one fetch however many callers wait, reuse until shortly before expiry, invalidation."""

from __future__ import annotations

import asyncio

import pytest

from genworker.channels.outbound.tokens import TokenCache

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_concurrent_callers_share_one_fetch() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    calls = 0

    async def fetch() -> tuple[str, float]:
        nonlocal calls
        calls += 1
        started.set()
        await release.wait()  # every caller is waiting while the first fetch is in flight
        return f"token-{calls}", 7200

    cache = TokenCache(fetch)
    waiters = [asyncio.create_task(cache.get()) for _ in range(50)]
    await asyncio.wait_for(started.wait(), 5)
    release.set()
    tokens = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert set(tokens) == {"token-1"}
    assert calls == cache.fetches == 1


async def test_a_token_is_refreshed_a_margin_before_it_expires() -> None:
    clock = Clock()
    issued = iter(["t1", "t2", "t3"])

    async def fetch() -> tuple[str, float]:
        return next(issued), 7200

    cache = TokenCache(fetch, margin=300, clock=clock)
    assert await cache.get() == "t1"
    clock.now += 7200 - 301
    assert await cache.get() == "t1"
    clock.now += 2  # inside the margin
    assert await cache.get() == "t2"
    cache.invalidate("stale-value")  # a token that is no longer cached changes nothing
    assert await cache.get() == "t2"
    cache.invalidate("t2")
    assert await cache.get() == "t3"


async def test_a_short_lived_token_is_kept_for_half_its_life() -> None:
    clock = Clock()
    issued = iter(["a", "b"])

    async def fetch() -> tuple[str, float]:
        return next(issued), 120

    cache = TokenCache(fetch, margin=300, clock=clock)
    assert await cache.get() == "a"
    clock.now += 59
    assert await cache.get() == "a"
    clock.now += 2
    assert await cache.get() == "b"


async def test_a_failed_fetch_is_retried_by_the_next_caller() -> None:
    outcomes: list[BaseException | str] = [RuntimeError("vendor down"), "ok"]

    async def fetch() -> tuple[str, float]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome, 7200

    cache = TokenCache(fetch)
    with pytest.raises(RuntimeError, match="vendor down"):
        await cache.get()
    assert await cache.get() == "ok"
