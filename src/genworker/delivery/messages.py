"""What a message to a chat is, where it goes and how its delivery went: the values every sender shares.

The outbox, the channels' replies and the platform clients all speak in these terms; the platforms
themselves live in `genworker.channels`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["KEYED_PLATFORMS", "PLATFORMS", "ChatType", "DeliveryResult", "OutboundFormat", "OutboundMessage", "Target"]

PLATFORMS = ("slack", "feishu", "wecom", "dingtalk", "email")
# platforms that send one message per `OutboundMessage.key`, and for how long after the first (s)
KEYED_PLATFORMS: Mapping[str, float] = MappingProxyType({"feishu": 3600.0})

ChatType = Literal["p2p", "group"]
OutboundFormat = Literal["text", "markdown", "card"]


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    text: str
    format: OutboundFormat = "text"
    card: Mapping[str, Any] | None = None
    files: tuple[tuple[str, str], ...] = ()  # (file name, text) attachments; email only
    # the same for every send of one message (a retry, another process's): a vendor that dedupes on it
    # (KEYED_PLATFORMS) sends it once; a text split in pieces keys each piece `{key}-{n}`
    key: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    ok: bool
    platform: str
    message_id: str | None = None
    attempts: int = 1
    fell_back_to: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """Where a message goes: a chat, and for replies the message being answered."""

    chat_id: str
    chat_type: ChatType = "p2p"
    thread_id: str | None = None
    reply_to: str | None = None  # the platform message id being answered (Feishu's reply API)
    user_id: str | None = None  # the person, for platforms that address p2p chats by user
    context: Mapping[str, str] = field(default_factory=dict)
