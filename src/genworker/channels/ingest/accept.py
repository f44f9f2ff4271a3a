"""The route's side of channel ingest: claim an event once, journal it durably, hand it to the processor.

`ChannelIngest.accept`: a signature that covers no body (DingTalk) is claimed in the replay guard,
the event id in the dedupe store (a repeat stops there), the message is written to the worker's
journal (`journal.py`: `runtime/channels/journal/*.json`, atomic), and the route acks. The
`ChannelProcessor` (`processor.py`) works the journal until every message is answered and the
answer delivered.
"""

from __future__ import annotations

import asyncio

from genworker.channels.base import ChannelMessage, ReplayKey
from genworker.channels.dedupe import DedupeStore
from genworker.channels.errors import VerificationError
from genworker.channels.ingest.journal import EventJournal
from genworker.channels.ingest.processor import ChannelProcessor
from genworker.channels.registry import ChannelBinding
from genworker.channels.replay import FileReplayGuard, ReplayGuard

__all__ = ["ChannelIngest"]


class ChannelIngest:
    """The route's side: claim, journal, hand to the processor. True when newly accepted."""

    def __init__(
        self,
        dedupe: DedupeStore,
        journal: EventJournal,
        processor: ChannelProcessor | None = None,
        replay: ReplayGuard | None = None,
    ) -> None:
        self.dedupe = dedupe
        self.journal = journal
        self.processor = processor
        self.replay = replay or FileReplayGuard(journal.root)

    async def accept(self, binding: ChannelBinding, message: ChannelMessage, replay: ReplayKey | None = None) -> bool:
        """VerificationError `replayed` when `replay` (a signature over no body) already came with
        another message."""
        tenant_id, worker_id, event_id = binding.tenant_id, binding.worker_id, message.event_id
        if replay is not None and not await self.replay.first_use(tenant_id, worker_id, replay, event_id):
            raise VerificationError(
                "replay", "this timestamp and sign were already used by another message", code="replayed"
            )
        key = f"{binding.platform}:{binding.key}:{event_id}"
        try:
            if not await self.dedupe.claim(tenant_id, worker_id, key):
                return False
            try:
                entry = await asyncio.to_thread(self.journal.append, message)
            except BaseException:
                await self.dedupe.release(tenant_id, worker_id, key)  # let the platform retry
                raise
        except BaseException:
            if replay is not None:
                await self.replay.forget(tenant_id, worker_id, replay, event_id)
            raise
        if self.processor is not None:
            self.processor.submit(entry)
        return True
