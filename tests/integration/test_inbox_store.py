"""One suite, both inbox backends: files on tmp_path and the real Redis server.

Time is a controllable clock shared by the store and the aggregate; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from genworker.autonomy.inbox import (
    ITEM_CONSUMED,
    ITEM_DEAD,
    ITEM_FAILED,
    ITEM_REQUEUED,
    ITEM_WRITTEN,
    FileInboxStore,
    InboxAggregate,
    InboxCorruptError,
    InboxItem,
    InboxItemNotFoundError,
    InboxSchemaError,
    InboxState,
    InboxStore,
    InboxWriter,
    InvalidItemError,
    InvalidTransitionError,
    RedisInboxStore,
    StaleLeaseError,
    encode_item,
    new_item,
)
from genworker.autonomy.inbox.store import micros
from genworker.bus import Event, InProcessEventBus
from genworker.ids import InvalidIdError

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Backend:
    """A store factory plus what the tests need to poke at the storage directly."""

    kind: str

    def __init__(self) -> None:
        self.clock = Clock()
        self.bus = InProcessEventBus()
        self.events: list[Event] = []
        self.bus.subscribe("inbox.*", self._record)
        self.store = self.reopen()

    async def _record(self, event: Event) -> None:
        self.events.append(event)

    async def topics(self) -> list[str]:
        await self.bus.drain()
        return [e.topic for e in self.events]

    def reopen(self) -> InboxStore:
        """A new store object over the same files / Redis keys (another runner, after a restart)."""
        raise NotImplementedError

    def aggregate(self, store: InboxStore | None = None, **kwargs: Any) -> InboxAggregate:
        kwargs.setdefault("retry_delay", lambda attempts: timedelta(0))
        return InboxAggregate(store or self.store, bus=self.bus, clock=self.clock, **kwargs)

    async def plant(self, item: InboxItem, doc: str, *, schema_version: Any = 1) -> str:
        """Store `doc` as the pending item `item` behind the store's back; the source errors must name."""
        raise NotImplementedError

    async def close(self) -> None:
        await self.bus.close()


class FileBackend(Backend):
    kind = "file"

    def __init__(self, root: Path) -> None:
        self.root = root
        super().__init__()

    def reopen(self) -> FileInboxStore:
        return FileInboxStore(self.root, bus=self.bus, clock=self.clock)

    def folder(self, tenant_id: str = "acme", worker_id: str = "alice") -> Path:
        return self.root / "tenants" / tenant_id / "workers" / worker_id / "runtime" / "inbox"

    async def plant(self, item: InboxItem, doc: str, *, schema_version: Any = 1) -> str:
        path = (
            self.folder(item.tenant_id, item.worker_id)
            / "pending"
            / f"{micros(item.created_at):020d}.{item.item_id}.json"
        )
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(path.write_text, doc, encoding="utf-8")
        return str(path)


class RedisBackend(Backend):
    kind = "redis"

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix
        super().__init__()

    def reopen(self) -> RedisInboxStore:
        return RedisInboxStore(self.client, prefix=self.prefix, bus=self.bus, clock=self.clock)

    async def plant(self, item: InboxItem, doc: str, *, schema_version: Any = 1) -> str:
        base = f"{self.prefix}:{item.tenant_id}:{item.worker_id}:inbox:"
        key = f"{base}item:{item.item_id}"
        created = micros(item.created_at)
        fields: dict[Any, Any] = {"doc": doc, "schema_version": str(schema_version), "created": created}
        await self.client.hset(key, mapping=fields | {"state": "pending", "attempts": 0, "version": 1})
        await self.client.zadd(f"{base}state:pending", {item.item_id: created})
        await self.client.zadd(f"{base}all", {item.item_id: created})
        return f"redis key {key}"


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "file":
        file_backend = FileBackend(tmp_path / "ws")
        yield file_backend
        await file_backend.close()
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"gwtest-{uuid.uuid4().hex}"
    client = Redis.from_url(url)
    redis_backend = RedisBackend(client, prefix)
    try:
        yield redis_backend
    finally:
        await redis_backend.close()
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def item(n: int = 0, *, worker_id: str = "alice", at: datetime | None = None, **more: Any) -> InboxItem:
    """Item n, created n seconds after T0 unless `at` says otherwise."""
    value = new_item(
        "acme", worker_id, "webhook", "hook-1", "webhook.fact", {"n": n, "nested": {"list": [1, 2]}}, **more
    )
    return replace(value, created_at=at or T0 + timedelta(seconds=n))


async def write_all(store: InboxStore, count: int, **more: Any) -> list[InboxItem]:
    items = [item(n, **more) for n in range(count)]
    for value in items:
        assert await store.write(value)
    return items


# -- write and read ---------------------------------------------------------------


async def test_write_then_get_round_trips(backend: Backend) -> None:
    value = item(1, route="summary", dedupe_key="k1", metadata={"sensor": "hook-1"})
    writer: InboxWriter = backend.store  # what sensors are given
    assert await writer.write(value) is True
    stored = await backend.store.get("acme", "alice", value.item_id)
    assert stored == replace(value, version=1)
    assert stored is not None and stored.payload["nested"]["list"] == (1, 2)
    assert await backend.reopen().get("acme", "alice", value.item_id) == stored
    assert await backend.store.get("acme", "alice", "ibx_missing") is None
    assert await backend.store.get("acme", "nobody", value.item_id) is None


async def test_duplicates_are_dropped_per_worker(backend: Backend) -> None:
    first, plain, other = item(1, dedupe_key="commit-abc"), item(5), item(6)
    assert await backend.store.write(first) is True
    assert await backend.store.write(item(2, dedupe_key="commit-abc")) is False
    assert await backend.reopen().write(item(3, dedupe_key="commit-abc")) is False
    assert await backend.store.write(first) is False  # the same item id again
    assert await backend.store.write(item(4, dedupe_key="commit-abc", worker_id="bob")) is True
    assert await backend.store.write(plain) is True  # no key: never a duplicate
    assert await backend.store.write(other) is True
    listed = [i.item_id for i in await backend.store.list("acme", "alice")]
    assert listed == [first.item_id, plain.item_id, other.item_id]
    assert await backend.topics() == [ITEM_WRITTEN] * 4  # nothing published for a duplicate


async def test_a_consumed_item_still_holds_its_dedupe_key(backend: Backend) -> None:
    inbox = backend.aggregate()
    await backend.store.write(item(1, dedupe_key="once"))
    (claimed,) = await inbox.claim("acme", "alice", "r1")
    await inbox.consume(claimed, "r1")
    assert await backend.store.write(item(2, dedupe_key="once")) is False


async def test_consume_many_writes_together_and_reports_each_item(backend: Backend) -> None:
    agg = backend.aggregate()
    values = [item(n) for n in range(5)]
    for value in values:
        await backend.store.write(value)
    mine = await agg.claim("acme", "alice", "r1", limit=4)
    (theirs,) = await agg.claim("acme", "alice", "r2", limit=1)
    already = await agg.consume(mine[3], "r1")
    stale = replace(mine[1], version=mine[1].version - 1)  # an old copy: the one-by-one path decides
    results = await agg.consume_many([mine[0], stale, already, theirs, mine[2]], "r1")
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["InboxItem", "InboxItem", "InboxItem", "StaleLeaseError", "InboxItem"]
    consumed = {i.item_id for i in await backend.store.list("acme", "alice", InboxState.CONSUMED)}
    assert consumed == {v.item_id for v in mine}
    assert (await backend.store.get("acme", "alice", theirs.item_id)).state is InboxState.PROCESSING  # type: ignore[union-attr]
    assert (await backend.topics()).count("inbox.item_consumed") == 4  # one event per change, none twice
    assert await agg.consume_many([], "r1") == []
    with pytest.raises(ValueError):
        await backend.store.compare_and_set_many([(mine[0], 1), (mine[0], 1)])


async def test_purge_deletes_old_consumed_items_only(backend: Backend) -> None:
    agg = backend.aggregate(max_attempts=1)
    old = [item(n, dedupe_key=f"k{n}") for n in range(3)]
    young, dead, pending = item(500, dedupe_key="k500"), item(4), item(5)
    for value in (*old, young, dead, pending):
        assert await backend.store.write(value)
    claimed = {i.item_id: i for i in await agg.claim("acme", "alice", "r1", limit=10)}
    for value in (*old, young):
        await agg.consume(claimed[value.item_id], "r1")
    await agg.fail(claimed[dead.item_id], "r1", "boom", retry=False)
    backend.clock.now = T0 + timedelta(seconds=400)
    # consumed before T0+100s: the three old ones; young, the dead letter and others stay
    assert await agg.purge_consumed("acme", "alice", timedelta(seconds=300), limit=2) == 2
    assert await agg.purge_consumed("acme", "alice", timedelta(seconds=300)) == 1
    assert await agg.purge_consumed("acme", "alice", timedelta(seconds=300)) == 0
    for value in old:
        assert await backend.store.get("acme", "alice", value.item_id) is None
    assert (await backend.store.get("acme", "alice", young.item_id)) is not None
    assert (await backend.store.get("acme", "alice", dead.item_id)) is not None
    counts = await backend.store.counts("acme", "alice")
    assert counts[InboxState.CONSUMED] == 1 and counts[InboxState.DEAD] == 1
    assert [i.item_id for i in await backend.store.list("acme", "alice", InboxState.CONSUMED)] == [young.item_id]
    # a purged item's dedupe key is free again; a kept one still blocks
    assert await backend.store.write(item(600, dedupe_key="k0")) is True
    assert await backend.store.write(item(601, dedupe_key="k500")) is False
    with pytest.raises(ValueError):
        await backend.store.delete_consumed("acme", "alice", before=T0, limit=0)


async def test_write_refuses_what_it_cannot_store(backend: Backend) -> None:
    with pytest.raises(InvalidItemError, match="only a new item"):
        await backend.store.write(replace(item(), state=InboxState.PROCESSING))
    with pytest.raises(InvalidItemError, match="only a new item"):
        await backend.store.write(replace(item(), attempts=2))
    with pytest.raises(InvalidItemError, match="worker id"):
        await backend.store.write(replace(item(), worker_id="../bob"))
    with pytest.raises(InvalidItemError, match="inbox item id"):
        await backend.store.write(replace(item(), item_id="a/b"))
    with pytest.raises(InvalidItemError, match="dedupe_key"):
        await backend.store.write(item(dedupe_key=""))
    with pytest.raises(InvalidItemError, match="1970"):
        await backend.store.write(item(at=datetime(1969, 1, 1, tzinfo=UTC)))
    with pytest.raises(InvalidIdError):
        await backend.store.get("acme", "../alice", "x")
    assert await backend.store.list("acme", "alice") == ()


# -- claim ---------------------------------------------------------------------------


async def test_claim_takes_the_oldest_first_under_a_lease(backend: Backend) -> None:
    inbox = backend.aggregate()
    newer, oldest, middle = item(30), item(10), item(20)
    for value in (newer, oldest, middle):
        await backend.store.write(value)
    first = await inbox.claim("acme", "alice", "r1", limit=2, lease_s=60)
    assert [i.item_id for i in first] == [oldest.item_id, middle.item_id]
    lease = T0 + timedelta(seconds=60)
    assert {(i.state, i.lease_owner, i.lease_expires_at, i.attempts, i.version) for i in first} == {
        (InboxState.PROCESSING, "r1", lease, 1, 2)
    }
    assert await backend.store.get("acme", "alice", oldest.item_id) == first[0]
    assert [i.item_id for i in await inbox.claim("acme", "alice", "r2", limit=5)] == [newer.item_id]
    assert await inbox.claim("acme", "alice", "r2") == ()
    assert await inbox.claim("acme", "nobody", "r2") == ()
    with pytest.raises(ValueError, match="limit"):
        await inbox.claim("acme", "alice", "r2", limit=0)
    with pytest.raises(ValueError, match="owner"):
        await inbox.claim("acme", "alice", "")


async def test_two_runners_drain_1000_items_each_consumed_exactly_once(backend: Backend) -> None:
    items = await write_all(backend.store, 1000)
    consumed: list[str] = []

    async def runner(owner: str) -> None:
        inbox = backend.aggregate(backend.reopen())
        while batch := await inbox.claim("acme", "alice", owner, limit=7, lease_s=600):
            for claimed in batch:
                done = await inbox.consume(claimed, owner)
                assert done.state is InboxState.CONSUMED and done.lease_owner == owner
                consumed.append(claimed.item_id)

    await asyncio.wait_for(asyncio.gather(runner("r1"), runner("r2"), runner("r3")), 120)
    assert Counter(consumed) == Counter(i.item_id for i in items)
    counts = await backend.store.counts("acme", "alice")
    assert counts == {**dict.fromkeys(InboxState, 0), InboxState.CONSUMED: 1000}
    assert Counter(await backend.topics()) == {ITEM_WRITTEN: 1000, ITEM_CONSUMED: 1000}


# -- leases --------------------------------------------------------------------------


async def test_a_crashed_runners_items_come_back_after_the_lease(backend: Backend) -> None:
    inbox = backend.aggregate()
    await backend.store.write(item(1))
    (lost,) = await inbox.claim("acme", "alice", "crashed", lease_s=30)  # ... and never consumes it
    backend.clock.advance(29)
    assert await inbox.claim("acme", "alice", "r2") == ()
    backend.clock.advance(1)
    (again,) = await inbox.claim("acme", "alice", "r2", lease_s=30)
    assert again.item_id == lost.item_id and again.lease_owner == "r2" and again.attempts == 2
    assert again.last_error == "lease of crashed expired at 2025-01-01T12:00:30Z"
    assert again.lease_expires_at == T0 + timedelta(seconds=60)

    with pytest.raises(StaleLeaseError, match="under a lease of 'r2'"):
        await inbox.consume(lost, "crashed")  # the stale runner wakes up: refused
    with pytest.raises(StaleLeaseError):
        await inbox.fail(lost, "crashed", "boom")
    with pytest.raises(StaleLeaseError):
        await inbox.extend_lease(lost, "crashed", 30)
    done = await inbox.consume(again, "r2")
    assert done.state is InboxState.CONSUMED
    assert await inbox.consume(done, "r2") == done  # repeating it is harmless
    with pytest.raises(StaleLeaseError, match="it is consumed"):
        await inbox.consume(again, "crashed")
    assert await backend.topics() == [ITEM_WRITTEN, ITEM_CONSUMED]


async def test_an_expired_lease_is_still_honoured_until_someone_reclaims(backend: Backend) -> None:
    inbox = backend.aggregate()
    await backend.store.write(item(1))
    (claimed,) = await inbox.claim("acme", "alice", "slow", lease_s=10)
    backend.clock.advance(60)
    assert (await inbox.consume(claimed, "slow")).state is InboxState.CONSUMED


async def test_extend_lease_keeps_the_item(backend: Backend) -> None:
    inbox = backend.aggregate()
    await backend.store.write(item(1))
    (claimed,) = await inbox.claim("acme", "alice", "r1", lease_s=10)
    backend.clock.advance(8)
    extended = await inbox.extend_lease(claimed, "r1", 10)
    assert extended.lease_expires_at == T0 + timedelta(seconds=18)
    backend.clock.advance(8)
    assert await inbox.claim("acme", "alice", "r2") == ()
    backend.clock.advance(2)
    assert [i.lease_owner for i in await inbox.claim("acme", "alice", "r2")] == ["r2"]


async def test_a_stale_copy_still_works_for_the_holder(backend: Backend) -> None:
    inbox = backend.aggregate()
    await backend.store.write(item(1))
    (claimed,) = await inbox.claim("acme", "alice", "r1", lease_s=10)
    await inbox.extend_lease(claimed, "r1", 100)  # the stored version moves on
    done = await inbox.consume(claimed, "r1")  # from the older copy: reloaded, still held
    assert done.state is InboxState.CONSUMED and done.version == claimed.version + 2


async def test_compare_and_set_never_rewrites_what_was_sensed(backend: Backend) -> None:
    await backend.store.write(item(1))
    (claimed,) = await backend.aggregate().claim("acme", "alice", "r1")
    forged = replace(claimed, payload={"n": "forged"}, state=InboxState.CONSUMED)
    stored = await backend.store.compare_and_set(forged, claimed.version)
    assert stored is not None and stored.state is InboxState.CONSUMED and stored.payload["n"] == 1
    assert await backend.store.compare_and_set(forged, claimed.version) is None  # version moved on


# -- failures, dead letters, requeue -----------------------------------------------


async def test_failures_retry_then_dead_letter(backend: Backend) -> None:
    inbox = backend.aggregate(max_attempts=3)
    value = item(1)
    await backend.store.write(value)
    for attempt in (1, 2):
        (claimed,) = await inbox.claim("acme", "alice", "r1")
        assert claimed.attempts == attempt
        failed = await inbox.fail(claimed, "r1", f"boom {attempt}")
        assert (failed.state, failed.last_error, failed.lease_owner) == (InboxState.FAILED, f"boom {attempt}", None)
    (claimed,) = await inbox.claim("acme", "alice", "r1")
    dead = await inbox.fail(claimed, "r1", "boom 3")
    assert (dead.state, dead.attempts, dead.last_error) == (InboxState.DEAD, 3, "boom 3")
    assert await inbox.claim("acme", "alice", "r1") == ()
    assert (await backend.store.counts("acme", "alice"))[InboxState.DEAD] == 1
    assert [i.item_id for i in await backend.store.list("acme", "alice", InboxState.DEAD)] == [value.item_id]
    await backend.bus.drain()
    assert [e.topic for e in backend.events] == [ITEM_WRITTEN, ITEM_FAILED, ITEM_FAILED, ITEM_DEAD]
    assert dict(backend.events[-1].payload) | {"attempts": 3} == {
        "item_id": value.item_id,
        "state": "dead",
        "attempts": 3,
        "source_type": "webhook",
        "source_id": "hook-1",
        "event_type": "webhook.fact",
        "route": None,
        "owner": "r1",
        "error": "boom 3",
    }


async def test_a_failed_item_waits_for_its_retry_delay(backend: Backend) -> None:
    inbox = backend.aggregate(retry_delay=lambda attempts: timedelta(seconds=10 * attempts))
    await backend.store.write(item(1))
    await backend.store.write(item(2))
    (first,) = await inbox.claim("acme", "alice", "r1", limit=1)
    failed = await inbox.fail(first, "r1", "rate limited")
    assert failed.retry_at == T0 + timedelta(seconds=10)
    await backend.bus.drain()
    assert backend.events[-1].payload["retry_at"] == "2025-01-01T12:00:10Z"
    assert [i.payload["n"] for i in await inbox.claim("acme", "alice", "r1", limit=5)] == [2]
    backend.clock.advance(10)
    (retried,) = await inbox.claim("acme", "alice", "r1", limit=5)
    assert (retried.item_id, retried.attempts, retried.retry_at, retried.last_error) == (
        first.item_id,
        2,
        None,
        "rate limited",
    )


async def test_fail_without_retry_is_dead_at_once(backend: Backend) -> None:
    inbox = backend.aggregate(max_attempts=5)
    await backend.store.write(item(1))
    (claimed,) = await inbox.claim("acme", "alice", "r1")
    assert (await inbox.fail(claimed, "r1", "payload is not a commit", retry=False)).state is InboxState.DEAD


async def test_a_crash_loop_is_dead_lettered_at_claim(backend: Backend) -> None:
    inbox = backend.aggregate(max_attempts=2)
    await backend.store.write(item(1))
    for _ in range(2):  # two deliveries, each runner dies
        assert len(await inbox.claim("acme", "alice", "r1", lease_s=5)) == 1
        backend.clock.advance(5)
    assert await inbox.claim("acme", "alice", "r2", lease_s=5) == ()
    (dead,) = await backend.store.list("acme", "alice", InboxState.DEAD)
    assert dead.attempts == 3 and dead.last_error is not None
    assert dead.last_error.startswith("delivered 2 times without a result; lease of r1 expired")
    assert await backend.topics() == [ITEM_WRITTEN, ITEM_DEAD]


async def test_requeue(backend: Backend) -> None:
    inbox = backend.aggregate(max_attempts=1)
    dead_one, live, done, waiting = item(1), item(2), item(3), item(4)
    for value in (dead_one, live, done, waiting):
        await backend.store.write(value)
    claimed = await inbox.claim("acme", "alice", "r1", limit=3, lease_s=30)
    await inbox.fail(claimed[0], "r1", "boom")
    await inbox.consume(claimed[2], "r1")

    requeued = await inbox.requeue("acme", "alice", dead_one.item_id)
    assert (requeued.state, requeued.attempts, requeued.last_error) == (InboxState.PENDING, 0, "boom")
    assert await inbox.requeue("acme", "alice", dead_one.item_id) == requeued  # already pending
    assert await inbox.requeue("acme", "alice", waiting.item_id) == await backend.store.get(
        "acme", "alice", waiting.item_id
    )
    with pytest.raises(InvalidTransitionError, match="it is consumed"):
        await inbox.requeue("acme", "alice", done.item_id)
    with pytest.raises(InvalidTransitionError, match="leased to 'r1' until 2025-01-01T12:00:30Z"):
        await inbox.requeue("acme", "alice", live.item_id)
    backend.clock.advance(30)
    assert (await inbox.requeue("acme", "alice", live.item_id)).state is InboxState.PENDING
    with pytest.raises(StaleLeaseError):
        await inbox.consume(claimed[1], "r1")  # requeued from under the (expired) lease
    with pytest.raises(InboxItemNotFoundError):
        await inbox.requeue("acme", "alice", "ibx_missing")
    assert [i.item_id for i in await inbox.claim("acme", "alice", "r2", limit=5)] == [
        dead_one.item_id,
        live.item_id,
        waiting.item_id,
    ]
    await backend.bus.drain()
    requeues = [e for e in backend.events if e.topic == ITEM_REQUEUED]
    assert [(e.payload["item_id"], e.payload["previous_state"]) for e in requeues] == [
        (dead_one.item_id, "dead"),
        (live.item_id, "processing"),
    ]


# -- list and counts ---------------------------------------------------------------


async def test_list_filters_by_state_oldest_first_with_paging(backend: Backend) -> None:
    inbox = backend.aggregate()
    items = await write_all(backend.store, 6)
    claimed = await inbox.claim("acme", "alice", "r1", limit=3)
    await inbox.consume(claimed[0], "r1")
    await inbox.fail(claimed[1], "r1", "boom")
    ids = [i.item_id for i in items]

    async def listed(state: InboxState | None = None, **paging: int) -> list[str]:
        return [i.item_id for i in await backend.store.list("acme", "alice", state, **paging)]

    assert await listed() == ids
    assert await listed(limit=2, offset=1) == ids[1:3]
    assert await listed(offset=10) == []
    assert await listed(limit=0) == []
    assert await listed(InboxState.PENDING) == ids[3:]
    assert await listed(InboxState.PENDING, limit=2, offset=1) == ids[4:6]
    assert await listed(InboxState.CONSUMED) == ids[:1]
    assert await listed(InboxState.FAILED) == ids[1:2]
    assert await listed(InboxState.PROCESSING) == ids[2:3]
    assert await listed(InboxState.DEAD) == []
    assert await backend.store.counts("acme", "alice") == {
        InboxState.PENDING: 3,
        InboxState.PROCESSING: 1,
        InboxState.CONSUMED: 1,
        InboxState.FAILED: 1,
        InboxState.DEAD: 0,
    }
    assert await backend.store.counts("acme", "nobody") == dict.fromkeys(InboxState, 0)
    with pytest.raises(ValueError, match="negative"):
        await backend.store.list("acme", "alice", offset=-1)


async def test_workers_and_tenants_are_isolated(backend: Backend) -> None:
    inbox = backend.aggregate()
    mine = item(1)
    await backend.store.write(mine)
    await backend.store.write(item(2, worker_id="bob"))
    assert await backend.store.get("acme", "bob", mine.item_id) is None
    assert await backend.store.get("globex", "alice", mine.item_id) is None
    assert [i.worker_id for i in await inbox.claim("acme", "bob", "r1", limit=5)] == ["bob"]
    assert await inbox.claim("globex", "alice", "r1") == ()
    assert (await backend.store.counts("acme", "alice"))[InboxState.PENDING] == 1


# -- unreadable items --------------------------------------------------------------


async def test_an_unknown_schema_version_is_named_and_left_alone(backend: Backend) -> None:
    inbox = backend.aggregate()
    good = item(2)
    await backend.store.write(good)
    future = item(1)
    doc = json.loads(encode_item(future))
    doc["schema_version"] = 999
    source = await backend.plant(future, json.dumps(doc), schema_version=999)

    with pytest.raises(InboxSchemaError) as caught:
        await backend.store.get("acme", "alice", future.item_id)
    assert source in str(caught.value) and "999" in str(caught.value)
    assert [i.item_id for i in await backend.store.list("acme", "alice")] == [good.item_id]
    assert [i.item_id for i in await inbox.claim("acme", "alice", "r1", limit=5)] == [good.item_id]
    assert await inbox.claim("acme", "alice", "r1", limit=5) == ()
    with pytest.raises(InboxSchemaError):  # still there, untouched, for a newer runtime
        await backend.store.get("acme", "alice", future.item_id)


async def test_a_corrupt_item_is_named_and_moved_aside_and_nothing_else_is_lost(backend: Backend) -> None:
    inbox = backend.aggregate()
    before, after = item(1), item(3)
    await backend.store.write(before)
    await backend.store.write(after)
    broken = item(2)
    source = await backend.plant(broken, '{"schema_version": 1, "item_id": ')

    with pytest.raises(InboxCorruptError) as caught:
        await backend.store.get("acme", "alice", broken.item_id)
    assert source in str(caught.value)
    assert [i.item_id for i in await backend.store.list("acme", "alice")] == [before.item_id, after.item_id]
    claimed = await inbox.claim("acme", "alice", "r1", limit=5)
    assert [i.item_id for i in claimed] == [before.item_id, after.item_id]
    assert await inbox.claim("acme", "alice", "r1", limit=5) == ()
    counts = await backend.store.counts("acme", "alice")
    assert counts[InboxState.PROCESSING] == 2 and counts[InboxState.PENDING] == 0
    with pytest.raises(InboxCorruptError):  # kept for a person to look at
        await backend.store.get("acme", "alice", broken.item_id)
    for value in claimed:
        await inbox.consume(value, "r1")


async def test_an_item_planted_under_another_worker_is_refused(backend: Backend) -> None:
    planted = item(1, worker_id="bob")
    source = await backend.plant(replace(planted, worker_id="alice"), encode_item(replace(planted, version=1)).decode())
    with pytest.raises(InboxCorruptError, match="expected worker 'alice'") as caught:
        await backend.store.get("acme", "alice", planted.item_id)
    assert source in str(caught.value)
