"""Worker ownership across processes (issue #30): rendezvous hashing over the live instances gives
each worker one owner, the same in every process; a join or a leave moves only the workers of the
instance that came or went; the Redis claim lets one process act at a time and a stop hands over at
once. Every claim test uses real Redis with two clients, as two processes would."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterable
from datetime import timedelta

import pytest
import redis
from redis.asyncio import Redis

from genworker.cluster import Ownership, RedisLiveInstances, rendezvous_owner, worker_key
from genworker.worker.lifecycle.leases import REDIS_PREFIX, RedisInstanceLeases

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

WORKERS = [(f"t{n % 7}", f"w{n}") for n in range(900)]
KEYS = [worker_key(t, w) for t, w in WORKERS]


class Seen:
    """A live set as one process saw it at one moment (the views differ around a join or a death)."""

    def __init__(self, *ids: str) -> None:
        self.ids = frozenset(ids)

    async def live(self) -> frozenset[str]:
        return self.ids


def owners(instances: Iterable[str]) -> dict[str, str | None]:
    ids = list(instances)
    return {key: rendezvous_owner(key, ids) for key in KEYS}


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Redis, Redis]]:
    a, b = Redis.from_url(redis_url), Redis.from_url(redis_url)  # two connections, as two processes have
    try:
        yield a, b
    finally:
        await a.aclose()
        await b.aclose()


def test_every_worker_has_one_owner_the_same_whatever_the_order_and_they_are_spread() -> None:
    assert rendezvous_owner("acme/alice", []) is None
    first = owners(["rt_a", "rt_b", "rt_c"])
    assert first == owners(["rt_c", "rt_a", "rt_b"]) == owners(["rt_b", "rt_c", "rt_a", "rt_a"])
    share = Counter(first.values())
    assert set(share) == {"rt_a", "rt_b", "rt_c"}
    assert all(len(KEYS) * 0.25 < n < len(KEYS) * 0.42 for n in share.values()), share


def test_a_join_or_a_leave_moves_only_the_workers_of_that_instance() -> None:
    three = owners(["rt_a", "rt_b", "rt_c"])
    four = owners(["rt_a", "rt_b", "rt_c", "rt_d"])
    moved = {key for key in KEYS if three[key] != four[key]}
    assert moved and all(four[key] == "rt_d" for key in moved)  # only to the newcomer
    assert len(KEYS) * 0.15 < len(moved) < len(KEYS) * 0.35  # about a quarter, not a reshuffle
    two = owners(["rt_a", "rt_c"])
    moved = {key for key in KEYS if three[key] != two[key]}
    assert moved == {key for key in KEYS if three[key] == "rt_b"}  # only what the leaver had


async def test_the_live_set_is_read_from_the_instance_leases(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url)
    mine = [RedisInstanceLeases(sync), RedisInstanceLeases(sync)]
    client = Redis.from_url(redis_url)
    try:
        for lease in mine:
            lease.renew()
        live = RedisLiveInstances(client, REDIS_PREFIX)
        assert {lease.instance_id for lease in mine} <= await live.live()
        mine[0].release()
        seen = await live.live()
        assert mine[1].instance_id in seen and mine[0].instance_id not in seen
    finally:
        mine[1].release()
        sync.close()
        await client.aclose()


async def test_two_processes_that_both_think_they_own_a_worker_never_both_hold_it(
    clients: tuple[Redis, Redis], redis_prefix: str
) -> None:
    a_client, b_client = clients
    prefix = f"{redis_prefix}:owner:"
    # a sees both instances; b has not seen a's lease yet, so b's hash names b for every worker
    a = Ownership(a_client, "rt_a", Seen("rt_a", "rt_b"), prefix=prefix)
    b = Ownership(b_client, "rt_b", Seen("rt_b"), prefix=prefix)
    await a.refresh()
    await b.refresh()
    mine = [(t, w) for t, w in WORKERS[:60] if a.owns(t, w)]
    assert mine and all(b.owns(t, w) for t, w in mine)
    won = await asyncio.gather(*(x.claim(t, w) for t, w in mine for x in (a, b)))
    pairs = list(zip(won[0::2], won[1::2], strict=True))
    assert all(sum(pair) == 1 for pair in pairs), pairs  # exactly one of the two holds each worker
    assert {worker_key(t, w) for t, w in mine} == a.held | b.held and not a.held & b.held
    # renewing keeps what each holds: the other still waits
    assert all([await a.claim(t, w) for t, w in mine if a.holds(t, w)])
    assert not any([await b.claim(t, w) for t, w in mine if a.holds(t, w)])


async def test_a_stop_hands_the_workers_over_at_once(clients: tuple[Redis, Redis], redis_prefix: str) -> None:
    a_client, b_client = clients
    prefix = f"{redis_prefix}:owner:"
    b_sees = Seen("rt_a", "rt_b")
    a = Ownership(a_client, "rt_a", Seen("rt_a", "rt_b"), prefix=prefix)
    b = Ownership(b_client, "rt_b", b_sees, prefix=prefix)
    workers = WORKERS[:30]
    everything = {worker_key(t, w) for t, w in workers}
    held_a, held_b = await a.beat(workers), await b.beat(workers)
    assert held_a and held_b and held_a | held_b == everything and not held_a & held_b
    b_sees.ids = frozenset({"rt_b"})  # a's lease is gone (released, or expired)
    assert await b.beat(workers) == held_b  # a still holds its claims: b waits for them
    await a.release_all()  # a stops
    assert a.held == frozenset()
    assert await b.beat(workers) == everything  # at b's next beat, with no expiry to wait for


async def test_a_dead_owners_claim_expires_and_only_then_the_next_owner_takes_it(
    clients: tuple[Redis, Redis], redis_prefix: str
) -> None:
    a_client, b_client = clients
    prefix = f"{redis_prefix}:owner:"
    ttl = timedelta(milliseconds=300)
    a = Ownership(a_client, "rt_a", Seen("rt_a"), ttl=ttl, prefix=prefix)
    b = Ownership(b_client, "rt_b", Seen("rt_b"), ttl=ttl, prefix=prefix)
    assert await a.beat([("acme", "alice")]) == {"acme/alice"}
    assert await b.beat([("acme", "alice")]) == frozenset()  # a holds it; a dies here (no release)
    assert 0 < await b_client.pttl(f"{prefix}acme/alice") <= 300  # the claim lives one ttl unless renewed
    async with asyncio.timeout(10):
        while not await b.claim("acme", "alice"):  # noqa: ASYNC110 - Redis's expiry sends no event to wait on
            await asyncio.sleep(0.02)
    assert await b_client.get(f"{prefix}acme/alice") == b"rt_b"


async def test_an_owner_that_learns_of_a_newcomer_gives_up_what_moves_to_it(
    clients: tuple[Redis, Redis], redis_prefix: str
) -> None:
    a_client, c_client = clients
    prefix = f"{redis_prefix}:owner:"
    workers = WORKERS[:40]
    a_sees = Seen("rt_a")
    a = Ownership(a_client, "rt_a", a_sees, prefix=prefix)
    assert len(await a.beat(workers)) == len(workers)
    c = Ownership(c_client, "rt_c", Seen("rt_a", "rt_c"), prefix=prefix)  # joins
    assert await c.beat(workers) == frozenset()  # a has not seen it yet and holds every claim: c waits
    a_sees.ids = frozenset({"rt_a", "rt_c"})
    kept = await a.beat(workers)  # a's next beat gives up what moves
    moved = await c.beat(workers)
    assert moved and kept and kept | moved == {worker_key(t, w) for t, w in workers} and not kept & moved
    assert moved == {worker_key(t, w) for t, w in workers if c.owns(t, w)}


async def test_redis_down_means_holding_nothing() -> None:
    nowhere = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        ownership = Ownership(nowhere, "rt_a", RedisLiveInstances(nowhere, REDIS_PREFIX))
        assert await ownership.beat([("acme", "alice")]) == frozenset()
        assert not ownership.holds("acme", "alice")
    finally:
        await nowhere.aclose()
