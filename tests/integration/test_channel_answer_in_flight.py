"""An IM answer being sent when its process dies (issue #30, docs/deploy.md): the journal entry
records that a send began, in the same write as the answer, so the process that takes the entry
over never sends it a second time — it sets it aside as `outcome_unknown` for a person, who may
re-send it. An answer the vendor refused is not in doubt: the next owner sends it, once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.integration.test_channel_ingest import ALIVE, DEAD, RecordingReplier, message, registry

from genworker.channels.base import ChannelMessage
from genworker.channels.ingest import ChannelProcessor, EventJournal
from genworker.channels.registry import ChannelRegistry
from genworker.delivery.messages import DeliveryResult, OutboundMessage

__all__ = ["registry"]  # the fixture, shared with test_channel_ingest


class CutOff(RecordingReplier):
    """The vendor takes the answer, and the process dies before it hears so (it never returns)."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = asyncio.Event()

    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult:
        await super().reply(message, outbound)
        self.taken.set()
        await asyncio.Event().wait()  # the kill: nothing after the send runs
        raise AssertionError("unreachable")


class Refusing(RecordingReplier):
    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult:
        return DeliveryResult(ok=False, platform=message.platform, error="503 from the vendor")


async def handle(processor: ChannelProcessor, take_over: bool = True) -> None:
    if take_over:
        assert await processor.take_over(ALIVE) == 0  # its owner lives: not taken
        assert await processor.take_over(DEAD) == 1
    await processor.start()
    await asyncio.wait_for(processor.drain(), 10)
    await processor.stop()


def test_an_answer_cut_off_mid_send_is_not_sent_again_by_the_heir(registry: ChannelRegistry) -> None:
    root = registry.workspace.root
    first, second = EventJournal(root, "rt_first"), EventJournal(root, "rt_second")
    entry = first.append(message("acme~w~slack", "D7:1", "/help"))
    vendor, heir_vendor = CutOff(), RecordingReplier()

    async def scenario() -> None:
        dying = ChannelProcessor(registry, first, replier=vendor)
        dying.submit(entry)
        await dying.start()
        await asyncio.wait_for(vendor.taken.wait(), 10)
        await dying.stop()  # killed with the send on the wire
        heir = ChannelProcessor(registry, second, replier=heir_vendor)
        await handle(heir)
        assert heir.outcomes == {"D7:1": "outcome_unknown"}
        [owed] = await heir.undelivered("acme", "w")
        assert owed["state"] == "outcome_unknown" and owed["answer"] == vendor.replies[0][1].text[:500]
        assert heir_vendor.replies == []  # the person got it once, from the process that died
        # a person who learns it never arrived re-sends it: sent once more, on request
        assert await heir.resend("acme", "w", owed["id"]) == "replied"
        assert await heir.undelivered("acme", "w") == []

    asyncio.run(scenario())
    assert len(vendor.replies) == 1 and len(heir_vendor.replies) == 1
    assert vendor.replies[0][1].text == heir_vendor.replies[0][1].text
    assert second.pending() == [] and not list((entry.path.parent / "dead").glob("*.json"))


def test_an_answer_the_vendor_refused_is_sent_once_by_the_heir(registry: ChannelRegistry) -> None:
    root = registry.workspace.root
    first, second = EventJournal(root, "rt_first"), EventJournal(root, "rt_second")
    entry = first.append(message("acme~w~slack", "D7:2", "/help"))
    heir_vendor = RecordingReplier()

    async def scenario() -> None:
        refused = ChannelProcessor(registry, first, replier=Refusing())
        refused.submit(entry)
        await handle(refused, take_over=False)
        assert refused.outcomes == {"D7:2": "undelivered"}  # to be tried again: then its process dies
        assert first.read(entry.path).sending is None
        heir = ChannelProcessor(registry, second, replier=heir_vendor)
        heir.clock = lambda: time.time() + 3600  # past the retry it was due for
        await handle(heir)
        assert heir.outcomes == {"D7:2": "replied"}

    asyncio.run(scenario())
    assert [m.event_id for m, _ in heir_vendor.replies] == ["D7:2"]
    assert second.pending() == []


def test_a_feishu_answer_cut_off_mid_send_is_sent_again_under_its_key(registry: ChannelRegistry) -> None:
    """Feishu sends one message per `uuid` within an hour: an answer in doubt goes out again under
    the same key (the vendor drops it if it had it); after the hour it is set aside like any other."""
    root = registry.workspace.root
    first, second = EventJournal(root, "rt_first"), EventJournal(root, "rt_second")
    soon = first.append(message("acme~w~feishu-watch", "F7:1", "/help"))
    late = first.append(message("acme~w~feishu-watch", "F7:2", "/help"))
    vendor, heir_vendor = CutOff(), RecordingReplier()

    async def cut_off(entry_path: Path) -> None:
        vendor.taken.clear()
        dying = ChannelProcessor(registry, first, replier=vendor)
        dying.submit(first.read(entry_path))
        await dying.start(alive=lambda _instance: True)  # its own entries: none replayed
        await asyncio.wait_for(vendor.taken.wait(), 10)
        await dying.stop()

    async def scenario() -> None:
        await cut_off(soon.path)
        await cut_off(late.path)
        cut = first.read(late.path)
        assert cut.sending is not None
        first.update(cut, sending=cut.sending - 3600)  # that one was cut off an hour ago
        heir = ChannelProcessor(registry, second, replier=heir_vendor)
        assert await heir.take_over(DEAD) == 2
        await heir.start()
        await asyncio.wait_for(heir.drain(), 10)
        await heir.stop()
        assert heir.outcomes == {"F7:1": "replied", "F7:2": "outcome_unknown"}

    asyncio.run(scenario())
    assert [o.key for _, o in vendor.replies] == [soon.path.stem, late.path.stem]
    assert [(m.event_id, o.key) for m, o in heir_vendor.replies] == [("F7:1", soon.path.stem)]
