"""The channel interface: one normalised inbound message and the outbound protocols.

Every platform module turns a verified, decrypted webhook into a `ChannelMessage`;
everything after that (dedupe, commands, routing, replies) is platform-neutral.
Replies go through a `ChannelReplier`; proactive messages (briefs, reminders) through a
`ChannelSender`. Both are implemented by `genworker.channels.outbound`.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from genworker.delivery.messages import ChatType, DeliveryResult, OutboundMessage

__all__ = [
    "Attachment",
    "ChannelMessage",
    "ChannelReplier",
    "ChannelSender",
    "InboundAck",
    "InboundKind",
    "InboundRequest",
    "InboxWriter",
    "ReplayKey",
    "StreamingReplier",
]


@dataclass(frozen=True, slots=True)
class Attachment:
    kind: str  # "image" | "file" | "audio" | "video" | ...
    name: str | None
    mime_type: str | None
    size: int | None
    ref: str  # platform file key / URL


@dataclass(frozen=True, slots=True)
class ChannelMessage:
    platform: str  # "slack" | "feishu" | "wecom" | "dingtalk" | "email"
    adapter_id: str
    tenant_id: str
    worker_id: str
    event_id: str  # the platform's event/message id: the dedupe key
    chat_id: str
    chat_type: ChatType
    sender_id: str
    text: str
    received_at: str  # ISO-8601 UTC
    sender_name: str | None = None
    thread_id: str | None = None  # slack thread_ts, feishu root_id, email root Message-ID
    mentions: tuple[str, ...] = ()
    mentioned_bot: bool = False
    attachments: tuple[Attachment, ...] = ()
    reply_context: Mapping[str, str] = field(default_factory=dict)  # dingtalk sessionWebhook, email ids


class ChannelReplier(Protocol):
    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult: ...


@runtime_checkable
class StreamingReplier(Protocol):
    """A replier that can show an answer while it is produced (the channel's `reply_mode`)."""

    async def stream(self, message: ChannelMessage, pieces: AsyncIterable[str]) -> DeliveryResult: ...


class ChannelSender(Protocol):
    """Proactive messages (briefs, reminders) to the worker's owner / default chat."""

    async def send(
        self,
        tenant_id: str,
        worker_id: str,
        outbound: OutboundMessage,
        *,
        platform: str | None = None,
        chat_id: str | None = None,
    ) -> DeliveryResult: ...


class InboxWriter(Protocol):
    """Where a group message the worker only watches (`features.group_monitoring`) goes: a sensed fact
    in the worker's inbox. `autonomy.inbox.InboxFacts` implements it; the composition root wires it.
    False when `dedupe_key` was already seen (dropped)."""

    async def write_fact(
        self,
        tenant_id: str,
        worker_id: str,
        source_type: str,
        source_id: str,
        event_type: str,
        payload: Mapping[str, Any],
        *,
        dedupe_key: str,
        metadata: Mapping[str, Any],
    ) -> bool: ...


# -- inbound: what a platform module gets from the route and gives back ------------------------

InboundKind = Literal["webhook", "interactivity", "slash"]


@dataclass(frozen=True, slots=True)
class InboundRequest:
    method: str
    kind: InboundKind
    headers: Mapping[str, str]  # names lower-cased
    query: Mapping[str, str]
    body: bytes
    received_at: datetime  # timezone-aware


@dataclass(frozen=True, slots=True)
class ReplayKey:
    """A signature that does not cover the body (DingTalk's timestamp + sign): usable for one event
    only, until `expires_at` (Unix seconds), when its timestamp leaves the acceptance window."""

    value: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class InboundAck:
    """A verified request. `message` is None for events we acknowledge but do not handle
    (a bot's own message, an edit, an unsupported event type); `body` is the literal answer
    the platform expects (a URL-verification challenge, "success", ...)."""

    message: ChannelMessage | None = None
    body: bytes = b"{}"
    media_type: str = "application/json"
    note: str = ""  # why a verified request carries no message, for the log
    replay_key: ReplayKey | None = None  # claimed with the message: a second event under it is a replay
