"""RedisEventBus against the real Redis server: events cross bus instances (processes) exactly once."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from genworker.autonomy.inbox import ITEM_WRITTEN, FileInboxStore, new_item
from genworker.bus import (
    BusClosedError,
    Event,
    EventBus,
    EventPublishError,
    RedisEventBus,
    encode_event,
    new_event,
)

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

WAIT_S = 10  # only catches a hang


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = asyncio.Event()

    async def __call__(self, received: Event) -> None:
        self.events.append(received)
        self._changed.set()

    async def until(self, done: Callable[[list[Event]], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not done(self.events):
                self._changed.clear()
                await self._changed.wait()

    def ids(self) -> list[str]:
        return [e.event_id for e in self.events]


def event(topic: str, **payload: object) -> Event:
    return new_event(topic, source="test", tenant_id="acme", payload=payload)


@pytest.fixture
async def buses(redis_url: str) -> AsyncIterator[Callable[[], Awaitable[RedisEventBus]]]:
    """Started buses on one private channel, as separate processes would have them."""
    prefix = f"gwtest-{uuid.uuid4().hex}"
    made: list[RedisEventBus] = []

    async def make() -> RedisEventBus:
        bus = RedisEventBus(redis_url, prefix=prefix, close_timeout_s=1)
        made.append(bus)
        await bus.start()
        return bus

    yield make
    for bus in made:
        await bus.close()


async def test_events_cross_buses_and_nobody_gets_one_twice(
    buses: Callable[[], Awaitable[RedisEventBus]],
) -> None:
    one, two = await buses(), await buses()
    seen_by_one, seen_by_two = Recorder(), Recorder()
    as_protocol: EventBus = one
    as_protocol.subscribe("inbox.*", seen_by_one)
    two.subscribe("*", seen_by_two)

    first = event("inbox.item_written", n=1)
    await one.publish(first)
    await seen_by_two.until(lambda events: len(events) >= 1)
    assert seen_by_two.events == [first]  # decoded to an equal value on the other side

    second = event("inbox.item_dead", n=2)
    await two.publish(second)  # reaches `one` through Redis after any echo of `first` would have
    await seen_by_one.until(lambda events: second.event_id in [e.event_id for e in events])
    assert seen_by_one.ids() == [first.event_id, second.event_id]
    await two.drain()
    assert seen_by_two.ids() == [first.event_id, second.event_id]


async def test_garbage_on_the_channel_is_logged_and_skipped(
    buses: Callable[[], Awaitable[RedisEventBus]], redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    bus = await buses()
    recorder = Recorder()
    bus.subscribe("*", recorder)
    client = Redis.from_url(redis_url)
    bad_event = {"origin": "elsewhere", "event": {"schema_version": 9}}
    with caplog.at_level(logging.ERROR, logger="genworker.bus"):
        for raw in ("{not json", json.dumps([1]), json.dumps(bad_event)):
            await client.publish(bus.channel, raw)
        good = event("a.good")
        await client.publish(bus.channel, json.dumps({"origin": "elsewhere", "event": json.loads(encode_event(good))}))
        await recorder.until(lambda events: len(events) >= 1)
    await client.aclose()
    assert recorder.events == [good]
    messages = [r.getMessage() for r in caplog.records]
    assert any("not JSON" in m for m in messages)
    assert any("not an event envelope" in m for m in messages)
    assert any(
        f"redis channel {bus.channel}: unreadable event: unsupported event schema_version 9" in m for m in messages
    )


async def test_close_releases_the_listener_and_refuses_new_events(
    buses: Callable[[], Awaitable[RedisEventBus]],
) -> None:
    bus = await buses()
    recorder = Recorder()
    bus.subscribe("*", recorder)
    await bus.publish(event("a.one"))
    await bus.close()
    assert recorder.ids() and [t for t in asyncio.all_tasks() if t.get_name().startswith("redis-event-bus")] == []
    with pytest.raises(BusClosedError):
        await bus.publish(event("a.two"))
    with pytest.raises(BusClosedError):
        await bus.start()
    await bus.close()  # twice is harmless


async def test_an_unreachable_redis_still_delivers_locally() -> None:
    bus = RedisEventBus("redis://127.0.0.1:1/0", close_timeout_s=1)  # nothing listens on port 1
    recorder = Recorder()
    bus.subscribe("*", recorder)
    value = event("a.one")
    with pytest.raises(EventPublishError, match=value.event_id):
        await bus.publish(value)
    await bus.drain()
    assert recorder.events == [value]
    await bus.close()


async def test_inbox_writes_in_one_process_are_seen_in_another(
    buses: Callable[[], Awaitable[RedisEventBus]], tmp_path: Path
) -> None:
    writer_bus, heartbeat_bus = await buses(), await buses()
    heard = Recorder()
    heartbeat_bus.subscribe("inbox.item_written", heard)
    store = FileInboxStore(tmp_path / "ws", bus=writer_bus)
    item = new_item("acme", "alice", "git", "repo-1", "git.commit", {"sha": "abc"}, dedupe_key="abc")
    assert await store.write(item)
    assert not await store.write(item)
    await heard.until(lambda events: len(events) >= 1)
    (written,) = heard.events
    assert (written.topic, written.tenant_id, written.worker_id, written.source) == (
        ITEM_WRITTEN,
        "acme",
        "alice",
        "inbox",
    )
    assert written.payload["item_id"] == item.item_id and written.payload["dedupe_key"] == "abc"
