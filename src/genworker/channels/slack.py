"""Slack inbound: Events API, interactivity and slash commands, each signed with the v0 scheme.

Every request: `X-Slack-Request-Timestamp` within 5 minutes of now and `X-Slack-Signature`
equal (constant-time) to `v0=` HMAC-SHA256(signing_secret, `v0:{ts}:{raw body}`). Then:

- Events (`/webhook`): `url_verification` answers the challenge; `event_callback` with a
  `message` / `app_mention` event becomes a `ChannelMessage`. Its `event_id` is
  `{channel}:{ts}`, the message's own identity, so Slack's retries (`X-Slack-Retry-Num`)
  and the `message` + `app_mention` pair for one mention are handled once.
- Interactivity (`/interactivity`): a `block_actions` button whose value is
  `approve_confirmation:<id>` (or reject_/..._suggestion) becomes that IM command.
- Slash commands (`/slash`): `/approve_confirmation abc` (or `/genworker approve_confirmation abc`)
  becomes the IM command text.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from genworker.channels.base import Attachment, ChannelMessage, InboundAck, InboundRequest
from genworker.channels.commands import COMMANDS
from genworker.channels.crypto import slack_signature
from genworker.channels.errors import ChannelConfigError, VerificationError, header, json_object, malformed
from genworker.channels.registry import ChannelBinding
from genworker.delivery.messages import ChatType
from genworker.workspace.models.credentials import SlackCredentials

__all__ = ["PLATFORM", "WINDOW_S", "event_ack", "interaction_ack", "parse", "slash_ack", "verify"]

PLATFORM = "slack"
WINDOW_S = 300
_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_HANDLED_SUBTYPES = frozenset({"", "file_share", "thread_broadcast"})
_ACTION = re.compile(r"^((?:approve|reject)_(?:confirmation|suggestion)):([A-Za-z0-9_.-]{1,128})$")


def verify(binding: ChannelBinding, req: InboundRequest) -> None:
    creds = binding.credentials
    if not isinstance(creds, SlackCredentials):
        raise ChannelConfigError(f"{binding.adapter_id}: CHANNEL_CREDENTIALS.json has no slack.signing_secret")
    timestamp = header(req.headers, "X-Slack-Request-Timestamp")
    signature = header(req.headers, "X-Slack-Signature")
    if not timestamp.isdigit():
        raise VerificationError(
            "timestamp", "X-Slack-Request-Timestamp is not a Unix timestamp", code="stale_timestamp"
        )
    if abs(req.received_at.timestamp() - int(timestamp)) > WINDOW_S:
        raise VerificationError(
            "timestamp", "X-Slack-Request-Timestamp is more than 5 minutes off", code="stale_timestamp"
        )
    expected = slack_signature(creds.signing_secret.get_secret_value(), timestamp, req.body)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise VerificationError("signature", "X-Slack-Signature does not match")


def parse(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    verify(binding, req)
    match req.kind:
        case "webhook":
            return _event(binding, req)
        case "interactivity":
            return _interaction(binding, req)
        case "slash":
            return _slash(binding, req)


def _event(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    return event_ack(binding, json_object(req.body), req.received_at)


def event_ack(binding: ChannelBinding, data: dict[str, Any], received_at: datetime) -> InboundAck:
    """An Events API body (a webhook's, or a Socket Mode `events_api` envelope's payload)."""
    kind = data.get("type")
    if kind == "url_verification":
        challenge = data.get("challenge")
        if not isinstance(challenge, str):
            raise malformed("challenge", "url_verification without a challenge string")
        return InboundAck(body=challenge.encode("utf-8"), media_type="text/plain")
    if kind != "event_callback":
        return InboundAck(note=f"event type {kind!r} not handled")
    event = data.get("event")
    if not isinstance(event, dict):
        raise malformed("json", "event_callback without an event object")
    if event.get("type") not in ("message", "app_mention"):
        return InboundAck(note=f"event {event.get('type')!r} not handled")
    if event.get("bot_id") or event.get("subtype", "") not in _HANDLED_SUBTYPES:
        return InboundAck(note="bot message or edit: not handled")
    channel, ts, user = event.get("channel"), event.get("ts"), event.get("user")
    if not (isinstance(channel, str) and isinstance(ts, str) and isinstance(user, str)):
        raise malformed("json", "message event without channel, ts or user")
    text = str(event.get("text") or "")
    bot_user = _bot_user(data)
    mentions = tuple(_MENTION.findall(text))
    mentioned = event.get("type") == "app_mention" or (bot_user is not None and bot_user in mentions)
    if bot_user:
        text = re.sub(rf"<@{re.escape(bot_user)}(?:\|[^>]*)?>", "", text)
    chat_type: ChatType = "p2p" if event.get("channel_type") == "im" else "group"
    thread_ts = event.get("thread_ts")
    context = {"channel": channel, "ts": ts, "slack_event_id": str(data.get("event_id", ""))}
    if isinstance(thread_ts, str):
        context["thread_ts"] = thread_ts
    message = ChannelMessage(
        platform=PLATFORM,
        adapter_id=binding.adapter_id,
        tenant_id=binding.tenant_id,
        worker_id=binding.worker_id,
        event_id=f"{channel}:{ts}",
        chat_id=channel,
        chat_type=chat_type,
        sender_id=user,
        text=text.strip(),
        received_at=_iso(received_at),
        thread_id=thread_ts if isinstance(thread_ts, str) else None,
        mentions=mentions,
        mentioned_bot=mentioned,
        attachments=tuple(_file(f) for f in event.get("files") or () if isinstance(f, dict)),
        reply_context=context,
    )
    return InboundAck(message)


def _bot_user(data: dict[str, Any]) -> str | None:
    for auth in data.get("authorizations") or ():
        if isinstance(auth, dict) and auth.get("is_bot") and isinstance(auth.get("user_id"), str):
            return str(auth["user_id"])
    return None


def _file(info: dict[str, Any]) -> Attachment:
    size = info.get("size")
    return Attachment(
        kind=str(info.get("filetype") or "file"),
        name=info.get("name"),
        mime_type=info.get("mimetype"),
        size=size if isinstance(size, int) else None,
        ref=str(info.get("url_private") or info.get("id") or ""),
    )


def _form(body: bytes) -> dict[str, str]:
    try:
        pairs = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(body))
    except (UnicodeDecodeError, ValueError) as exc:
        raise malformed("form", f"the body is not a valid form: {exc}") from None
    return {k: v[0] for k, v in pairs.items()}


def _slash(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    return slash_ack(binding, _form(req.body), req.received_at)


def slash_ack(binding: ChannelBinding, fields: Mapping[str, Any], received_at: datetime) -> InboundAck:
    """A slash command's fields (a webhook's form, or a Socket Mode `slash_commands` payload)."""
    form: dict[str, str] = {k: v for k, v in fields.items() if isinstance(v, str)}
    command, text = form.get("command", "").strip(), form.get("text", "").strip()
    user, channel, trigger = form.get("user_id"), form.get("channel_id"), form.get("trigger_id")
    if not (command and user and channel and trigger):
        raise malformed("form", "slash command without command, user_id, channel_id or trigger_id")
    name = command.lstrip("/").lower()
    if name in COMMANDS:
        text = f"/{name} {text}".strip()
    elif text.split(" ", 1)[0].lower() in COMMANDS:  # `/genworker approve_confirmation abc`
        text = "/" + text
    message = ChannelMessage(
        platform=PLATFORM,
        adapter_id=binding.adapter_id,
        tenant_id=binding.tenant_id,
        worker_id=binding.worker_id,
        event_id=f"slash:{trigger}",
        chat_id=channel,
        chat_type="p2p" if form.get("channel_name") == "directmessage" else "group",
        sender_id=user,
        sender_name=form.get("user_name"),
        text=text,
        received_at=_iso(received_at),
        mentioned_bot=True,  # a slash command is addressed to the app
        reply_context={"channel": channel, "response_url": form.get("response_url", "")},
    )
    return InboundAck(message, body=b"", media_type="text/plain")


def _interaction(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    payload = json_object(_form(req.body).get("payload", "").encode("utf-8"), "payload field")
    return interaction_ack(binding, payload, req.received_at)


def interaction_ack(binding: ChannelBinding, payload: dict[str, Any], received_at: datetime) -> InboundAck:
    """An interaction payload (a webhook's `payload` field, or a Socket Mode `interactive` payload)."""
    if payload.get("type") != "block_actions":
        return InboundAck(body=b"", media_type="text/plain", note=f"interaction {payload.get('type')!r} not handled")
    actions = payload.get("actions") or []
    action = actions[0] if actions and isinstance(actions[0], dict) else {}
    value = str(action.get("value") or action.get("action_id") or "")
    match = _ACTION.match(value)
    user = (payload.get("user") or {}).get("id")
    channel = (payload.get("channel") or {}).get("id")
    if match is None or not isinstance(user, str) or not isinstance(channel, str):
        return InboundAck(body=b"", media_type="text/plain", note=f"action {value!r} not handled")
    container = payload.get("container") or {}
    message_ts = str(container.get("message_ts") or "")
    message = ChannelMessage(
        platform=PLATFORM,
        adapter_id=binding.adapter_id,
        tenant_id=binding.tenant_id,
        worker_id=binding.worker_id,
        event_id=f"action:{payload.get('trigger_id') or action.get('action_ts')}",
        chat_id=channel,
        chat_type="p2p" if channel.startswith("D") else "group",
        sender_id=user,
        text=f"/{match.group(1)} {match.group(2)}",
        received_at=_iso(received_at),
        mentioned_bot=True,
        reply_context={"channel": channel, "ts": message_ts, "response_url": str(payload.get("response_url") or "")},
    )
    return InboundAck(message, body=b"", media_type="text/plain")


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()
