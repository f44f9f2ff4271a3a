"""DingTalk inbound: outgoing-robot (HTTP callback) messages signed with the app secret.

Headers `timestamp` (ms) and `sign`: sign must equal base64 HMAC-SHA256(app_secret,
`"{timestamp}\\n{app_secret}"`) (constant-time), and the timestamp may be at most one hour
off, the window DingTalk documents for robot callbacks. The sign covers only the timestamp, so
the pair is the message's `replay_key`: the ingest refuses it for any other message until the
timestamp leaves the window. The message is keyed by `msgId`; `conversationType` "1" is a
one-to-one chat, "2" a group, where `isInAtList` says the robot was mentioned. Replies go through the message's
`sessionWebhook`, kept in `reply_context` with its expiry.
"""

from __future__ import annotations

import hmac
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from genworker.channels.base import Attachment, ChannelMessage, InboundAck, InboundRequest, ReplayKey
from genworker.channels.crypto import dingtalk_sign
from genworker.channels.errors import ChannelConfigError, VerificationError, header, json_object, malformed
from genworker.channels.registry import ChannelBinding
from genworker.workspace.models.credentials import DingTalkCredentials

__all__ = ["MAX_SKEW_S", "PLATFORM", "message_ack", "parse", "verify"]

PLATFORM = "dingtalk"
MAX_SKEW_S = 3600


def verify(binding: ChannelBinding, req: InboundRequest) -> ReplayKey:
    """The request's `(timestamp, sign)`, once both are valid."""
    creds = binding.credentials
    if not isinstance(creds, DingTalkCredentials):
        raise ChannelConfigError(f"{binding.adapter_id}: CHANNEL_CREDENTIALS.json has no dingtalk.app_secret")
    timestamp = header(req.headers, "timestamp")
    sign = header(req.headers, "sign")
    if not timestamp.isdigit():
        raise VerificationError(
            "timestamp", "the timestamp header is not milliseconds since the epoch", code="stale_timestamp"
        )
    if abs(req.received_at.timestamp() * 1000 - int(timestamp)) > MAX_SKEW_S * 1000:
        raise VerificationError("timestamp", "the timestamp header is more than 1 hour off", code="stale_timestamp")
    expected = dingtalk_sign(creds.app_secret.get_secret_value(), timestamp)
    if not hmac.compare_digest(expected.encode(), sign.encode()):
        raise VerificationError("signature", "the sign header does not match")
    return ReplayKey(f"dingtalk:{binding.adapter_id}:{timestamp}:{sign}", int(timestamp) / 1000 + MAX_SKEW_S)


def parse(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    replay_key = verify(binding, req)
    return replace(message_ack(binding, json_object(req.body), req.received_at), replay_key=replay_key)


def message_ack(binding: ChannelBinding, data: dict[str, Any], received_at: datetime) -> InboundAck:
    """A robot message: a verified callback's body, or the data of a Stream-mode bot message."""
    msg_id, conversation, sender = (
        data.get("msgId"),
        data.get("conversationId"),
        data.get("senderStaffId") or data.get("senderId"),
    )
    if not (isinstance(msg_id, str) and isinstance(conversation, str) and isinstance(sender, str)):
        raise malformed("json", "the message has no msgId, conversationId or senderId")
    text, attachments = _content(data)
    at_users = [u for u in data.get("atUsers") or () if isinstance(u, dict)]
    context = {"conversation_id": conversation}
    if isinstance(data.get("sessionWebhook"), str):
        context["session_webhook"] = data["sessionWebhook"]
        context["session_webhook_expires_ms"] = str(data.get("sessionWebhookExpiredTime", ""))
    if isinstance(data.get("robotCode"), str):
        context["robot_code"] = data["robotCode"]
    group = str(data.get("conversationType")) == "2"
    message = ChannelMessage(
        platform=PLATFORM,
        adapter_id=binding.adapter_id,
        tenant_id=binding.tenant_id,
        worker_id=binding.worker_id,
        event_id=msg_id,
        chat_id=conversation,
        chat_type="group" if group else "p2p",
        sender_id=sender,
        sender_name=data.get("senderNick") if isinstance(data.get("senderNick"), str) else None,
        text=text.strip(),
        received_at=received_at.astimezone(UTC).isoformat(),
        mentions=tuple(str(u.get("staffId") or u.get("dingtalkId") or "") for u in at_users),
        mentioned_bot=bool(data.get("isInAtList")) if group else True,
        attachments=attachments,
        reply_context=context,
    )
    return InboundAck(message)


def _content(data: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
    match data.get("msgtype"):
        case "text":
            text = data.get("text")
            return (str(text.get("content") or "") if isinstance(text, dict) else ""), ()
        case "picture":
            content = data.get("content") or {}
            return "", (Attachment("image", None, None, None, str(content.get("downloadCode") or "")),)
        case "richText":
            items = (data.get("content") or {}).get("richText") or []
            text = "".join(str(i.get("text") or "") for i in items if isinstance(i, dict))
            files = tuple(
                Attachment("image", None, None, None, str(i["downloadCode"]))
                for i in items
                if isinstance(i, dict) and i.get("downloadCode")
            )
            return text, files
        case _:
            return "", ()
