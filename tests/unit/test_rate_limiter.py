"""The anonymous routes' sliding-window rate limiter, on a clock the test moves."""

from __future__ import annotations

import pytest

from genworker.api.ratelimit import RateLimiter


def test_a_key_gets_limit_hits_per_window_and_is_told_how_long_to_wait() -> None:
    now = [100.0]
    limiter = RateLimiter(2, 60, clock=lambda: now[0])
    assert limiter.hit("a") is None
    now[0] += 10
    assert limiter.hit("a") is None
    assert limiter.hit("a") == 50  # the first hit leaves the window in 50 s
    assert limiter.hit("b") is None  # each key counts alone
    now[0] += 50
    assert limiter.hit("a") is None
    assert limiter.hit("a") == 10


def test_refused_hits_do_not_count() -> None:
    now = [0.0]
    limiter = RateLimiter(1, 60, clock=lambda: now[0])
    assert limiter.hit("a") is None
    for _ in range(5):
        assert limiter.hit("a") == 60
    now[0] = 60.0
    assert limiter.hit("a") is None


def test_idle_keys_are_forgotten_once_there_are_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("genworker.api.ratelimit._MAX_KEYS", 3)
    now = [0.0]
    limiter = RateLimiter(1, 60, clock=lambda: now[0])
    for key in "abc":
        limiter.hit(key)
    now[0] = 61.0
    limiter.hit("d")
    assert set(limiter._hits) == {"d"}


def test_a_limit_needs_a_positive_size_and_window() -> None:
    with pytest.raises(ValueError, match="limit >= 1"):
        RateLimiter(0, 60)
    with pytest.raises(ValueError, match="window_s > 0"):
        RateLimiter(1, 0)


@pytest.mark.redis
def test_in_redis_two_processes_share_one_limit_and_a_lost_redis_counts_here(
    redis_url: str, redis_prefix: str
) -> None:
    """Two limiters on their own clients (as two processes have) count one window: of 20 concurrent
    hits, exactly `limit` pass."""
    import asyncio

    from redis import asyncio as aioredis

    from genworker.api.ratelimit import RedisRateLimiter

    async def scenario() -> tuple[list[int | None], list[int | None], int | None]:
        clients = [aioredis.Redis.from_url(redis_url) for _ in range(2)]
        try:
            a, b = (RedisRateLimiter(c, "anon", 5, 60, prefix=redis_prefix) for c in clients)
            hits = await asyncio.gather(*(limiter.check(("acme", "desk")) for _ in range(10) for limiter in (a, b)))
            other = await asyncio.gather(a.check(("acme", "other")), b.check(("acme", "other")))
            clients.append(aioredis.Redis.from_url("redis://127.0.0.1:1/0"))  # nothing listens there
            gone = RedisRateLimiter(clients[-1], "anon", 1, 60)
            await gone.check(("x",))
            return list(hits), list(other), await gone.check(("x",))
        finally:
            for client in clients:
                await client.aclose()

    hits, other, unreachable = asyncio.run(scenario())
    assert hits.count(None) == 5
    assert all(wait is not None and 1 <= wait <= 60 for wait in hits if wait is not None)
    assert other == [None, None]  # each key counts alone
    assert unreachable == 60  # no Redis: the limit still holds, in this process
