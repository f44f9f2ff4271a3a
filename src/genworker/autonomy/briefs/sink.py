"""BriefSink (contract F) and its adapter onto the channels' ChannelSender: briefs and
interruptions go to the worker's owner / default chat, as Markdown."""

from __future__ import annotations

import logging
from typing import Protocol

from genworker.channels.base import ChannelSender
from genworker.delivery.messages import OutboundMessage

__all__ = ["BriefSink", "ChannelBriefSink"]

log = logging.getLogger("genworker.briefs")


class BriefSink(Protocol):
    """Where briefs and real-time interruptions go."""

    async def deliver(self, tenant_id: str, worker_id: str, text: str) -> bool: ...


class ChannelBriefSink:
    def __init__(self, sender: ChannelSender) -> None:
        self.sender = sender

    async def deliver(self, tenant_id: str, worker_id: str, text: str) -> bool:
        result = await self.sender.send(tenant_id, worker_id, OutboundMessage(text=text, format="markdown"))
        if not result.ok:
            log.warning("[Briefs] %s/%s: %s delivery failed: %s", tenant_id, worker_id, result.platform, result.error)
        return result.ok
