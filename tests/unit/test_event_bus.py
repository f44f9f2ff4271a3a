"""The in-process EventBus and the event codec. Nothing sleeps: handlers signal asyncio.Events."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import MappingProxyType

import pytest

from genworker.bus import (
    BusClosedError,
    Event,
    EventBus,
    EventDecodeError,
    InProcessEventBus,
    decode_event,
    encode_event,
    new_event,
    topic_matches,
    validate_pattern,
)

pytestmark = pytest.mark.anyio

WAIT_S = 10  # only catches a hang


def event(topic: str = "inbox.item_written", **payload: object) -> Event:
    return new_event(topic, source="test", tenant_id="acme", worker_id="alice", payload=payload)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.arrived = asyncio.Event()

    async def __call__(self, received: Event) -> None:
        self.events.append(received)
        self.arrived.set()

    @property
    def topics(self) -> list[str]:
        return [e.topic for e in self.events]


@pytest.fixture
async def bus() -> AsyncIterator[InProcessEventBus]:
    value = InProcessEventBus(close_timeout_s=1)
    yield value
    await value.close()


# -- topics and patterns -----------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("inbox.*", "inbox.item_written", True),
        ("inbox.*", "inbox.item.nested", True),
        ("inbox.*", "inbox", False),
        ("inbox.*", "inboxes.item_written", False),
        ("*", "anything.at_all", True),
        ("*.item_dead", "inbox.item_dead", True),
        ("inbox.item_?ead", "inbox.item_dead", True),
        ("inbox.item_[cd]*", "inbox.item_failed", False),
        ("inbox.item_written", "inbox.item_written", True),
        ("inbox.item_written", "inbox.item_written_again", False),
    ],
)
def test_topic_patterns_are_fnmatch(pattern: str, topic: str, expected: bool) -> None:
    assert topic_matches(validate_pattern(pattern), topic) is expected


@pytest.mark.parametrize("pattern", ["", "Inbox.*", "inbox item", "inbox/*"])
def test_bad_patterns_are_refused(pattern: str) -> None:
    with pytest.raises(ValueError, match="topic pattern"):
        validate_pattern(pattern)


@pytest.mark.parametrize("topic", ["", "Inbox.x", "inbox.*", "inbox..x", ".inbox", "inbox x"])
def test_bad_topics_are_refused(topic: str) -> None:
    with pytest.raises(ValueError, match="event topic"):
        event(topic)


def test_events_are_immutable_and_aware() -> None:
    value = event(nested={"list": [1, 2]})
    assert isinstance(value.payload, MappingProxyType) and value.payload["nested"]["list"] == (1, 2)
    assert value.event_id.startswith("evt_") and value.occurred_at.tzinfo is not None
    with pytest.raises(ValueError, match="timezone-aware"):
        new_event("a.b", source="test", occurred_at=datetime(2025, 1, 1))  # noqa: DTZ001


# -- codec -------------------------------------------------------------------------


def test_codec_round_trip() -> None:
    value = event(n=1, nested={"list": [1, "x"]})
    assert decode_event(encode_event(value), "test") == value


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ('{"schema_version": 2}', "unsupported event schema_version 2"),
        ('{"schema_version": 1, "topic": "a.b"}', "event_id: Field required"),
    ],
)
def test_unreadable_events_name_their_source(raw: str, message: str) -> None:
    with pytest.raises(EventDecodeError, match=message) as caught:
        decode_event(raw, "redis channel x")
    assert str(caught.value).startswith("redis channel x: unreadable event")


def test_a_naive_timestamp_on_the_wire_is_refused() -> None:
    data = json.loads(encode_event(event()))
    data["occurred_at"] = "2025-01-01T12:00:00"
    with pytest.raises(EventDecodeError, match="occurred_at"):
        decode_event(json.dumps(data), "test")


# -- delivery ----------------------------------------------------------------------


async def test_subscribers_get_matching_events_in_order(bus: InProcessEventBus) -> None:
    as_protocol: EventBus = bus
    inbox, everything, dead = Recorder(), Recorder(), Recorder()
    as_protocol.subscribe("inbox.*", inbox)
    as_protocol.subscribe("*", everything)
    as_protocol.subscribe("*.item_dead", dead)
    for topic in ("inbox.item_written", "task.started", "inbox.item_dead", "inbox.item_consumed"):
        await as_protocol.publish(event(topic))
    await bus.drain()
    assert inbox.topics == ["inbox.item_written", "inbox.item_dead", "inbox.item_consumed"]
    assert everything.topics == ["inbox.item_written", "task.started", "inbox.item_dead", "inbox.item_consumed"]
    assert dead.topics == ["inbox.item_dead"]
    await as_protocol.close()


async def test_a_raising_handler_breaks_neither_the_publisher_nor_the_others(
    bus: InProcessEventBus, caplog: pytest.LogCaptureFixture
) -> None:
    async def explode(received: Event) -> None:
        raise RuntimeError(f"handler bug on {received.topic}")

    before, after = Recorder(), Recorder()
    bus.subscribe("*", before)
    bus.subscribe("*", explode)
    bus.subscribe("*", after)
    first, second = event("a.one"), event("a.two")
    with caplog.at_level(logging.ERROR, logger="genworker.bus"):
        await bus.publish(first)
        await bus.publish(second)
        await bus.drain()
    assert before.events == [first, second] and after.events == [first, second]
    failures = [r for r in caplog.records if "failed on event" in r.getMessage()]
    assert [first.event_id in r.getMessage() for r in failures] == [True, False]
    assert second.event_id in failures[1].getMessage() and failures[1].exc_info is not None
    await bus.close()


async def test_a_slow_handler_delays_neither_the_publisher_nor_the_others(bus: InProcessEventBus) -> None:
    release, started = asyncio.Event(), asyncio.Event()
    slow_seen: list[str] = []

    async def slow(received: Event) -> None:
        started.set()
        await release.wait()
        slow_seen.append(received.topic)

    fast = Recorder()
    bus.subscribe("*", slow)
    bus.subscribe("*", fast)
    for n in range(3):
        await bus.publish(event(f"a.e{n}"))  # returns although `slow` is stuck on the first
    await asyncio.wait_for(started.wait(), WAIT_S)
    while len(fast.events) < 3:
        fast.arrived.clear()
        await asyncio.wait_for(fast.arrived.wait(), WAIT_S)
    assert slow_seen == []
    release.set()
    await asyncio.wait_for(bus.drain(), WAIT_S)
    assert slow_seen == ["a.e0", "a.e1", "a.e2"]  # one at a time, in order
    await bus.close()


async def test_handlers_may_publish_and_drain_waits_for_the_cascade(bus: InProcessEventBus) -> None:
    leaf = Recorder()

    async def relay(received: Event) -> None:
        await bus.publish(event("b.relayed", origin=received.event_id))

    bus.subscribe("a.*", relay)
    bus.subscribe("b.*", leaf)
    await bus.publish(event("a.start"))
    await asyncio.wait_for(bus.drain(), WAIT_S)
    assert leaf.topics == ["b.relayed"]
    await bus.close()


async def test_unsubscribe_stops_delivery_at_once(bus: InProcessEventBus) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    async def handler(received: Event) -> None:
        seen.append(received.topic)
        entered.set()
        await release.wait()

    subscription = bus.subscribe("*", handler)
    await bus.publish(event("a.one"))
    await bus.publish(event("a.two"))  # queued behind the first
    await asyncio.wait_for(entered.wait(), WAIT_S)
    subscription.unsubscribe()
    assert not subscription.active and bus.subscriptions == ()
    release.set()
    await asyncio.wait_for(subscription.join(), WAIT_S)
    await bus.publish(event("a.three"))
    assert seen == ["a.one"]
    subscription.unsubscribe()  # twice is harmless
    await bus.close()


async def test_a_full_mailbox_drops_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    bus = InProcessEventBus(max_pending=2)
    release = asyncio.Event()

    async def stuck(received: Event) -> None:
        await release.wait()

    bus.subscribe("*", stuck)
    events = [event(f"a.e{n}") for n in range(3)]
    with caplog.at_level(logging.ERROR, logger="genworker.bus"):
        for value in events:
            await bus.publish(value)
    assert any(events[2].event_id in r.getMessage() and "dropped" in r.getMessage() for r in caplog.records)
    release.set()
    await bus.close()


async def test_close_drains_then_refuses_and_leaves_no_task() -> None:
    bus = InProcessEventBus(close_timeout_s=5)
    recorder = Recorder()
    bus.subscribe("*", recorder)
    await bus.publish(event("a.one"))
    await bus.close()
    assert recorder.topics == ["a.one"]  # delivered before close returned
    assert bus.closed and bus.subscriptions == ()
    with pytest.raises(BusClosedError):
        await bus.publish(event("a.two"))
    with pytest.raises(BusClosedError):
        bus.subscribe("*", recorder)
    await bus.close()  # twice is harmless
    assert _mailbox_tasks() == []


async def test_close_cancels_a_handler_that_never_returns(caplog: pytest.LogCaptureFixture) -> None:
    bus = InProcessEventBus(close_timeout_s=0.05)
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever(received: Event) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    bus.subscribe("*", forever)
    await bus.publish(event("a.one"))
    await asyncio.wait_for(started.wait(), WAIT_S)
    with caplog.at_level(logging.WARNING, logger="genworker.bus"):
        await asyncio.wait_for(bus.close(), WAIT_S)
    assert cancelled.is_set() and _mailbox_tasks() == []
    assert any("cancelled" in r.getMessage() for r in caplog.records)


def test_subscribe_needs_no_running_loop() -> None:
    bus = InProcessEventBus()
    subscription = bus.subscribe("inbox.*", Recorder())
    assert subscription.pattern == "inbox.*" and subscription.active
    with pytest.raises(ValueError, match="topic pattern"):
        bus.subscribe("Inbox", Recorder())


def _mailbox_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("event-mailbox") and not t.done()]


def test_occurred_at_defaults_to_now() -> None:
    before = datetime.now(UTC)
    assert before <= event().occurred_at <= datetime.now(UTC)
