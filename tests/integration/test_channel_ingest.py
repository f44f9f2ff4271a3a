"""Exactly-once ingest: dedupe claims (files, Redis), the durable journal and its replay after a
crash, which process owns a journal entry when several share the journal, and how the processor
routes group messages (mention_required, group_monitoring -> inbox).

Replies are counted at a recording ChannelReplier; the worker router is not needed for these
paths (commands and sensing never reach it), so the processor runs without one.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from genworker.autonomy.inbox import FileInboxStore, InboxFacts
from genworker.channels.base import ChannelMessage, ReplayKey
from genworker.channels.dedupe import MIN_TTL_S, FileDedupeStore, RedisDedupeStore
from genworker.channels.errors import VerificationError
from genworker.channels.ingest import FAILURE_TEXT, ChannelProcessor, EventJournal, create_channels
from genworker.channels.ingest.journal import EntryTakenOver
from genworker.channels.registry import ChannelRegistry
from genworker.channels.replay import FileReplayGuard, RedisReplayGuard, ReplayGuard
from genworker.delivery.messages import DeliveryResult, OutboundMessage
from genworker.workspace.registry import WorkspaceRegistry

PERSONA = """---
identity: {name: W, worker_id: w}
channels:
  - {type: slack}
  - {type: feishu, adapter_id: feishu-watch, chat_ids: [oc_watched], features: {group_monitoring: true}}
  - {type: dingtalk, features: {mention_required: false}}
---
Be helpful.
"""


class RecordingReplier:
    def __init__(self) -> None:
        self.replies: list[tuple[ChannelMessage, OutboundMessage]] = []

    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult:
        self.replies.append((message, outbound))
        return DeliveryResult(ok=True, platform=message.platform, message_id=f"m{len(self.replies)}")


@pytest.fixture
def registry(write_tree: Callable[[Mapping[str, str]], Path]) -> ChannelRegistry:
    root = write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "acme", "trust_level": 2}',
            "tenants/acme/workers/w/PERSONA.md": PERSONA,
        }
    )
    workspace = WorkspaceRegistry(root, product_skills=None)
    workspace.load_all()
    assert workspace.worker("acme", "w") is not None, workspace.issues()
    return ChannelRegistry(workspace)


def message(
    adapter: str, event_id: str, text: str, *, chat: str = "D1", group: bool = False, **kw: Any
) -> ChannelMessage:
    platform = adapter.split("~")[2].split("-")[0]
    return ChannelMessage(
        platform, adapter, "acme", "w", event_id, chat, "group" if group else "p2p", "U1", text,
        "2026-01-01T00:00:00+00:00", **kw,
    )  # fmt: skip


def test_registry_resolves_documented_adapter_ids(registry: ChannelRegistry) -> None:
    ids = sorted(b.adapter_id for b in registry.all())
    assert ids == ["acme~w~dingtalk", "acme~w~feishu-watch", "acme~w~slack"]
    binding = registry.resolve("acme~w~feishu-watch")
    assert binding is not None and binding.platform == "feishu" and binding.credentials is None
    for bad in ("acme~w", "acme~w~nope", "acme~ghost~slack", "../x~w~slack", "acme~w~slack~x"):
        assert registry.resolve(bad) is None
    assert [b.key for b in registry.bindings("acme", "w")] == ["slack", "feishu-watch", "dingtalk"]


def test_file_dedupe_one_winner_under_racing_threads_and_ttl(tmp_path: Path) -> None:
    now = [1000.0]
    store = FileDedupeStore(tmp_path, clock=lambda: now[0])
    start = threading.Barrier(16)

    def claim(_: int) -> bool:
        start.wait(timeout=10)
        return asyncio.run(store.claim("acme", "w", "slack:slack:C1:1"))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(claim, range(16)))
    assert results.count(True) == 1
    assert not asyncio.run(store.claim("acme", "w", "slack:slack:C1:1"))
    now[0] += store.ttl_s + 1  # expired: the key may be claimed again, once
    assert asyncio.run(store.claim("acme", "w", "slack:slack:C1:1"))
    assert not asyncio.run(store.claim("acme", "w", "slack:slack:C1:1"))
    now[0] += store.ttl_s + 1
    assert store.prune("acme", "w") == 1
    with pytest.raises(ValueError, match="at least"):
        FileDedupeStore(tmp_path, ttl_s=MIN_TTL_S - 1)


@pytest.mark.redis
def test_redis_dedupe_claims_once_with_a_ttl(redis_url: str) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        store = RedisDedupeStore(client)
        try:
            key = "feishu:feishu:om_1"
            await store.release("acme", "w", key)
            results = await asyncio.gather(*(store.claim("acme", "w", key) for _ in range(50)))
            assert results.count(True) == 1
            ttl = await client.ttl(store._key("acme", "w", key))
            assert MIN_TTL_S <= ttl <= store.ttl_s
            await store.release("acme", "w", key)
            assert await store.claim("acme", "w", key)
            await store.release("acme", "w", key)
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_accepted_event_survives_a_crash_and_is_answered_once(registry: ChannelRegistry) -> None:
    root = registry.workspace.root

    async def crash_before_processing() -> None:
        channels = create_channels(registry, dedupe=FileDedupeStore(root))
        channels.ingest.processor = None  # the process dies right after the ack
        binding = registry.resolve("acme~w~slack")
        assert binding is not None
        assert await channels.ingest.accept(binding, message("acme~w~slack", "D1:1", "/help"))
        assert not await channels.ingest.accept(binding, message("acme~w~slack", "D1:1", "/help"))

    asyncio.run(crash_before_processing())
    journal = EventJournal(root)
    assert len(journal.pending()) == 1

    async def restart(expected: int) -> RecordingReplier:
        replier = RecordingReplier()
        processor = ChannelProcessor(registry, journal, replier=replier)
        assert await processor.start() == expected
        await asyncio.wait_for(processor.drain(), 10)
        await processor.stop()
        return replier

    replier = asyncio.run(restart(1))
    assert [m.event_id for m, _ in replier.replies] == ["D1:1"]
    assert "/approve_confirmation" in replier.replies[0][1].text
    assert journal.pending() == []
    assert asyncio.run(restart(0)).replies == []  # nothing left to replay


def test_a_recorded_answer_is_resent_not_recomputed(registry: ChannelRegistry) -> None:
    journal = EventJournal(registry.workspace.root)
    entry = journal.append(message("acme~w~slack", "D1:2", "what is up?"))
    journal.update(entry, attempts=1, answer="Recorded answer.")  # crashed between answer and send

    async def restart() -> RecordingReplier:
        replier = RecordingReplier()  # no router: re-running would answer FAILURE_TEXT
        processor = ChannelProcessor(registry, journal, replier=replier)
        await processor.start()
        await asyncio.wait_for(processor.drain(), 10)
        await processor.stop()
        return replier

    replies = asyncio.run(restart()).replies
    assert [o.text for _, o in replies] == ["Recorded answer."]


def test_entries_that_keep_failing_get_the_failure_line_and_a_human(registry: ChannelRegistry) -> None:
    journal = EventJournal(registry.workspace.root)
    entry = journal.append(message("acme~w~slack", "D1:3", "hi"))
    journal.update(entry, attempts=3)  # three runs, each died with its process
    (entry.path.parent / "broken.json").write_text("{not json", encoding="utf-8")
    replier = RecordingReplier()

    async def restart() -> ChannelProcessor:
        processor = ChannelProcessor(registry, journal, replier=replier)
        assert await processor.start() == 2
        await asyncio.wait_for(processor.drain(), 10)
        await processor.stop()
        return processor

    processor = asyncio.run(restart())
    assert journal.pending() == []
    assert [p.name for p in (entry.path.parent / "dead").glob("*.json")] == ["broken.json"]  # unreadable: aside
    assert [(m.event_id, o.text) for m, o in replier.replies] == [("D1:3", FAILURE_TEXT)]
    assert processor.outcomes == {"D1:3": "failed"}
    [item] = asyncio.run(processor.needs_attention("acme", "w"))
    assert item["event_id"] == "D1:3" and "3 times" in item["reason"]


def test_group_messages_follow_mentions_chat_ids_and_monitoring(registry: ChannelRegistry) -> None:
    root = registry.workspace.root
    inbox = FileInboxStore(root)

    async def scenario() -> tuple[RecordingReplier, dict[str, Any]]:
        replier = RecordingReplier()
        processor = ChannelProcessor(registry, EventJournal(root), replier=replier, inbox=InboxFacts(inbox))
        journal = processor.journal
        cases = [
            message("acme~w~slack", "C1:1", "/help", chat="C1", group=True),  # no mention: ignored
            message("acme~w~slack", "C1:2", "/help", chat="C1", group=True, mentioned_bot=True),  # answered
            message("acme~w~feishu-watch", "om_1", "deploy failed", chat="oc_watched", group=True),  # sensed
            message("acme~w~feishu-watch", "om_2", "hello", chat="oc_other", group=True),  # not a bound chat
            message("acme~w~dingtalk", "ding_1", "/help", chat="cid", group=True),  # mention_required: false
            message("acme~w~slack", "D1:9", "hello", chat="D1"),  # no router: neutral failure line
        ]
        await processor.start()
        for case in cases:
            processor.submit(journal.append(case))
        await asyncio.wait_for(processor.drain(), 10)
        await processor.stop()
        return replier, dict(processor.outcomes)

    replier, outcomes = asyncio.run(scenario())
    assert outcomes == {
        "C1:1": "ignored",
        "C1:2": "command",
        "om_1": "sensed",
        "om_2": "ignored",
        "ding_1": "command",
        "D1:9": "failed",
    }
    assert sorted(m.event_id for m, _ in replier.replies) == ["C1:2", "D1:9", "ding_1"]
    assert next(o.text for m, o in replier.replies if m.event_id == "D1:9") == FAILURE_TEXT
    items = asyncio.run(inbox.list("acme", "w"))
    assert [(i.source_type, i.event_type, i.payload["text"]) for i in items] == [
        ("channel", "channel.group_message", "deploy failed")
    ]


def test_an_entry_queued_twice_is_handled_once(registry: ChannelRegistry) -> None:
    journal = EventJournal(registry.workspace.root)
    entry = journal.append(message("acme~w~slack", "D1:4", "/help"))

    async def scenario() -> RecordingReplier:
        replier = RecordingReplier()
        processor = ChannelProcessor(registry, journal, replier=replier)
        processor.submit(entry)  # live submit racing the start-up replay of the same file
        await processor.start()
        processor.submit(entry)
        await asyncio.wait_for(processor.drain(), 10)
        await processor.stop()
        return replier

    assert [m.event_id for m, _ in asyncio.run(scenario()).replies] == ["D1:4"]


@pytest.mark.redis
def test_concurrent_deliveries_with_redis_dedupe_journal_one_entry(registry: ChannelRegistry, redis_url: str) -> None:
    root = registry.workspace.root

    async def scenario() -> list[bool]:
        client = aioredis.Redis.from_url(redis_url)
        store = RedisDedupeStore(client)
        binding = registry.resolve("acme~w~slack")
        assert binding is not None
        await store.release("acme", "w", "slack:slack:D1:77")
        try:
            channels = create_channels(registry, dedupe=store)
            channels.ingest.processor = None
            delivery = message("acme~w~slack", "D1:77", "hello")
            return await asyncio.gather(*(channels.ingest.accept(binding, delivery) for _ in range(100)))
        finally:
            await store.release("acme", "w", "slack:slack:D1:77")
            await client.aclose()

    assert asyncio.run(scenario()).count(True) == 1
    assert len(EventJournal(root).pending()) == 1


KEY = ReplayKey("dingtalk:acme~w~dingtalk:1700000000000:c2lnbg==", 0.0)


async def _replay_rules(guard: ReplayGuard, now: float, expire: Callable[[], Awaitable[float]]) -> None:
    """One event per signature until it expires; the same event again is a platform retry."""
    key = ReplayKey(KEY.value, now + 60)
    assert await guard.first_use("acme", "w", key, "msg_1")
    assert await guard.first_use("acme", "w", key, "msg_1")  # DingTalk retrying the same message
    assert not await guard.first_use("acme", "w", key, "msg_2")  # the captured headers, another body
    assert await guard.first_use("acme", "other", key, "msg_2")  # another worker's app: its own pairs
    await guard.forget("acme", "w", key, "msg_2")  # not the holder: nothing happens
    assert not await guard.first_use("acme", "w", key, "msg_2")
    await guard.forget("acme", "w", key, "msg_1")  # msg_1 was not stored: its retry must pass
    assert await guard.first_use("acme", "w", key, "msg_1")
    later = await expire()  # the timestamp has left the window (it is refused before this store is asked)
    assert await guard.first_use("acme", "w", ReplayKey(key.value, later + 60), "msg_3")


def test_file_replay_guard_keeps_a_sign_for_one_message_until_it_expires(tmp_path: Path) -> None:
    now = [1_700_000_000.0]
    guard = FileReplayGuard(tmp_path, clock=lambda: now[0])

    async def expire() -> float:
        now[0] += 61
        return now[0]

    asyncio.run(_replay_rules(guard, now[0], expire))
    later = ReplayKey("dingtalk:acme~w~dingtalk:x", now[0] + 10)
    for i in range(300):  # pairs that expired are pruned as new ones arrive
        asyncio.run(guard.first_use("acme", "w", ReplayKey(f"old-{i}", now[0] + 1), f"m{i}"))
    now[0] += 2
    for i in range(300):
        asyncio.run(guard.first_use("acme", "w", ReplayKey(f"new-{i}", now[0] + 1), f"n{i}"))
    assert asyncio.run(guard.first_use("acme", "w", later, "m"))
    left = list(guard.folder("acme", "w").glob("*/*.json"))
    assert len(left) < 450  # most of the 300 expired ones are gone (each subfolder prunes on a new pair)


@pytest.mark.redis
def test_redis_replay_guard_follows_the_same_rules(redis_url: str) -> None:
    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        guard = RedisReplayGuard(client)
        guard.PREFIX = f"gwtest-{uuid.uuid4().hex}"
        held = guard._key("acme", "w", KEY)

        async def expire() -> float:
            await client.pexpireat(held, 1)  # a time in the past: Redis drops the key as its expiry would
            return time.time()

        try:
            await _replay_rules(guard, time.time(), expire)
            assert 0 < await client.pttl(held) <= 60_000
        finally:
            keys = [k async for k in client.scan_iter(match=f"{guard.PREFIX}:*")]
            if keys:
                await client.delete(*keys)
            await client.aclose()

    asyncio.run(scenario())


def test_a_replayed_sign_is_refused_and_a_failed_journal_write_frees_it(registry: ChannelRegistry) -> None:
    binding = registry.resolve("acme~w~dingtalk")
    assert binding is not None
    key = ReplayKey("dingtalk:acme~w~dingtalk:1:s", time.time() + 3600)

    async def scenario() -> None:
        channels = create_channels(registry, dedupe=FileDedupeStore(registry.workspace.root))
        channels.ingest.processor = None
        broken = channels.ingest.journal.append

        def fail(message: ChannelMessage) -> Any:
            raise OSError("disk full")

        channels.ingest.journal.append = fail  # type: ignore[method-assign]
        with pytest.raises(OSError):
            await channels.ingest.accept(binding, message("acme~w~dingtalk", "ding_a", "hi"), key)
        channels.ingest.journal.append = broken  # type: ignore[method-assign]
        assert await channels.ingest.accept(binding, message("acme~w~dingtalk", "ding_a", "hi"), key)  # the retry
        with pytest.raises(VerificationError) as refused:
            await channels.ingest.accept(binding, message("acme~w~dingtalk", "ding_b", "forged"), key)
        assert (refused.value.status, refused.value.code) == (401, "replayed")

    asyncio.run(scenario())
    assert [
        EventJournal(registry.workspace.root).read(p).message.event_id
        for p in EventJournal(registry.workspace.root).pending()
    ] == ["ding_a"]


# -- several processes on one journal (issue #30) ------------------------------------------------

ALIVE: Callable[[str], bool] = lambda _instance: True  # noqa: E731
DEAD: Callable[[str], bool] = lambda _instance: False  # noqa: E731


def test_an_entry_is_taken_over_only_from_an_instance_that_is_not_alive(tmp_path: Path) -> None:
    first, second = EventJournal(tmp_path, "rt_first"), EventJournal(tmp_path, "rt_second")
    entry = first.append(message("acme~w~slack", "D9:1", "hi"))
    assert second.read(entry.path).owner == "rt_first"
    assert second.claim(entry.path, ALIVE) is None  # its owner lives: it answers it
    taken = second.claim(entry.path, DEAD)
    assert taken is not None and taken.owner == "rt_second"
    assert second.claim(entry.path, DEAD) is None  # already this instance's
    # the first instance was only slow: each step it tries on the entry stops it
    assert not first.owned(entry)
    with pytest.raises(EntryTakenOver):
        first.update(entry, answer="a second answer")
    first.done(entry)
    assert entry.path.exists()
    second.done(second.update(taken, answer="the answer"))
    assert not entry.path.exists()


def test_an_entry_no_instance_owns_is_taken_at_start_only(tmp_path: Path) -> None:
    written_before_owners = EventJournal(tmp_path).append(message("acme~w~slack", "D9:2", "hi"))
    journal = EventJournal(tmp_path, "rt_new")
    assert journal.claim(written_before_owners.path, DEAD) is None  # a sweep leaves it to whoever has it
    taken = journal.claim(written_before_owners.path, DEAD, unowned=True)  # a start takes it
    assert taken is not None and taken.owner == "rt_new"


def test_an_answer_is_sent_once_by_the_instance_that_took_the_entry_over(registry: ChannelRegistry) -> None:
    root = registry.workspace.root
    first, second = EventJournal(root, "rt_first"), EventJournal(root, "rt_second")
    appended = first.append(message("acme~w~slack", "D9:3", "hi"))
    entry = first.update(appended, attempts=1, answer="Recorded answer.")  # not sent yet
    late, heir = RecordingReplier(), RecordingReplier()

    async def both() -> None:
        taking = ChannelProcessor(registry, second, replier=heir)
        assert await taking.take_over(ALIVE) == 0  # its owner lives
        assert await taking.take_over(DEAD) == 1
        # the first instance comes back to its entry after it was taken over: it sends nothing
        slow = ChannelProcessor(registry, first, replier=late)
        slow.submit(entry)
        await slow.start()
        await asyncio.wait_for(slow.drain(), 10)
        await slow.stop()
        assert entry.path.exists() and late.replies == []
        await taking.start()
        await asyncio.wait_for(taking.drain(), 10)
        await taking.stop()

    asyncio.run(both())
    assert (late.replies, [o.text for _, o in heir.replies]) == ([], ["Recorded answer."])
    assert second.pending() == []
