"""Feishu / Lark inbound: event schema 2.0, optionally encrypted, token-checked every time.

Order of checks. When the app has an `encrypt_key`, `X-Lark-Signature` = SHA-256(timestamp +
nonce + encrypt_key + raw body) is checked over the raw body before anything is parsed or
decrypted; then the body must be `{"encrypt": ...}` = base64(IV ‖ AES-256-CBC(PKCS7)) under key
SHA-256(encrypt_key). Feishu sends only its URL-verification handshake unsigned: an unsigned
request is decrypted and answered only if it is that handshake with the app's verification
token. Every failure before the request is authenticated (no or a wrong signature, bad base64,
bad padding, bad JSON, not the handshake, a wrong token in it) gets one and the same answer, so
the answers are no decryption oracle; the log names the failed check. After that (or without
encryption) the event must carry the app's verification token (`header.token`, or `token` for
the handshake) — a worker without a `verification_token` is misconfigured (503), never open.

`im.message.receive_v1` becomes a `ChannelMessage` keyed by `message_id` (Feishu retries an
unacknowledged event for hours with the same id). A group message mentions the bot when a
mention has `mentioned_type: "bot"` or the open id in `features.bot_open_id`.
"""

from __future__ import annotations

import hmac
import json
import logging
from datetime import UTC, datetime
from typing import Any

from genworker.channels.base import Attachment, ChannelMessage, InboundAck, InboundRequest
from genworker.channels.crypto import feishu_decrypt, feishu_signature
from genworker.channels.errors import (
    ChannelConfigError,
    ChannelError,
    VerificationError,
    check_window,
    json_object,
    malformed,
)
from genworker.channels.registry import ChannelBinding
from genworker.delivery.messages import ChatType
from genworker.workspace.models.credentials import FeishuCredentials

__all__ = ["PLATFORM", "REPLAY_WINDOW_S", "UNAUTHENTICATED", "event_ack", "parse"]

log = logging.getLogger("genworker.channels")

PLATFORM = "feishu"
MESSAGE_EVENT = "im.message.receive_v1"
REPLAY_WINDOW_S = 24 * 3600  # signed requests older than this are refused; younger ones meet the dedupe store
UNAUTHENTICATED = "X-Lark-Signature is missing or does not match"


def parse(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    creds = binding.credentials
    if not isinstance(creds, FeishuCredentials) or creds.verification_token is None:
        raise ChannelConfigError(f"{binding.adapter_id}: CHANNEL_CREDENTIALS.json has no feishu.verification_token")
    token = creds.verification_token.get_secret_value()
    encrypt_key = creds.encrypt_key.get_secret_value() if creds.encrypt_key is not None else ""
    if encrypt_key:
        if not req.headers.get("x-lark-signature"):  # only Feishu's URL check comes unsigned
            return _unsigned_handshake(req, encrypt_key, token)
        _check_signature(req, encrypt_key)
        encrypted = json_object(req.body).get("encrypt")
        if not isinstance(encrypted, str):
            raise VerificationError("encryption", "the app has an encrypt_key but the body is not encrypted")
        data = json_object(feishu_decrypt(encrypt_key, encrypted), "decrypted body")
    else:
        data = json_object(req.body)
        if "encrypt" in data:
            raise ChannelConfigError(f"{binding.adapter_id}: the body is encrypted but feishu.encrypt_key is not set")
    if data.get("type") == "url_verification":
        return _challenge(data, token)
    if data.get("schema") != "2.0" or not isinstance(data.get("header"), dict):
        _check_token(data.get("token"), token)  # a 1.0 event still proves itself before we refuse it
        raise malformed("schema", "only event schema 2.0 is supported")
    _check_token(data["header"].get("token"), token)
    return event_ack(binding, data, req.received_at)


def event_ack(binding: ChannelBinding, data: dict[str, Any], received_at: datetime) -> InboundAck:
    """A decrypted, authenticated schema 2.0 event: a webhook's after its checks, or one pushed over
    the app's long connection (authenticated by the app secret when the connection opened)."""
    head = data.get("header")
    if data.get("schema") != "2.0" or not isinstance(head, dict):
        raise malformed("schema", "only event schema 2.0 is supported")
    if head.get("event_type") != MESSAGE_EVENT:
        return InboundAck(note=f"event {head.get('event_type')!r} not handled")
    event = data.get("event")
    if not isinstance(event, dict):
        raise malformed("json", "im.message.receive_v1 without an event object")
    return InboundAck(_message(binding, event, received_at))


def _unauthenticated(check: str) -> VerificationError:
    """The one answer to every request that has not proved itself; only the log tells them apart."""
    return VerificationError(check, UNAUTHENTICATED)


def _unsigned_handshake(req: InboundRequest, encrypt_key: str, token: str) -> InboundAck:
    check = "missing_header"
    try:
        encrypted = json_object(req.body).get("encrypt")
        if not isinstance(encrypted, str):
            check = "encryption"
            raise ValueError("not encrypted")
        check = "decrypt"
        data = json_object(feishu_decrypt(encrypt_key, encrypted), "decrypted body")
        check = "missing_header"  # decrypted, but anything other than the handshake must be signed
        if data.get("type") != "url_verification":
            raise ValueError("not the URL check")
        check = "verification_token"
        return _challenge(data, token)
    except (ChannelError, ValueError) as exc:
        log.info("[Channels] feishu: unauthenticated request refused at check %s: %s", check, exc)
        raise _unauthenticated(check) from None


def _challenge(data: dict[str, Any], token: str) -> InboundAck:
    _check_token(data.get("token"), token)
    challenge = data.get("challenge")
    if not isinstance(challenge, str):
        raise malformed("challenge", "url_verification without a challenge string")
    return InboundAck(body=json.dumps({"challenge": challenge}).encode("utf-8"))


def _check_token(value: object, expected: str) -> None:
    if not isinstance(value, str) or not hmac.compare_digest(value.encode(), expected.encode()):
        raise VerificationError(
            "verification_token", "the verification token does not match", status=403, code="token_invalid"
        )


def _check_signature(req: InboundRequest, encrypt_key: str) -> None:
    timestamp = req.headers.get("x-lark-request-timestamp", "")
    nonce = req.headers.get("x-lark-request-nonce", "")
    signature = req.headers.get("x-lark-signature", "")
    if not timestamp or not nonce:
        raise _unauthenticated("missing_header")
    expected = feishu_signature(timestamp, nonce, encrypt_key, req.body)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise _unauthenticated("signature")
    check_window(timestamp, req.received_at.timestamp(), REPLAY_WINDOW_S, "X-Lark-Request-Timestamp")


def _message(binding: ChannelBinding, event: dict[str, Any], received_at: datetime) -> ChannelMessage:
    message = event.get("message")
    sender = event.get("sender")
    if not isinstance(message, dict) or not isinstance(sender, dict):
        raise malformed("json", "im.message.receive_v1 without message or sender")
    ids = sender.get("sender_id") or {}
    sender_id = ids.get("open_id") or ids.get("user_id") or ids.get("union_id")
    message_id, chat_id = message.get("message_id"), message.get("chat_id")
    if not (isinstance(message_id, str) and isinstance(chat_id, str) and isinstance(sender_id, str)):
        raise malformed("json", "message without message_id, chat_id or sender open_id")
    bot_open_id = binding.channel.features.get("bot_open_id")
    mentions = [m for m in message.get("mentions") or () if isinstance(m, dict)]
    mentioned_bot = False
    text, attachments = _content(message)
    for mention in mentions:
        open_id = (mention.get("id") or {}).get("open_id")
        is_bot = mention.get("mentioned_type") == "bot" or (bot_open_id is not None and open_id == bot_open_id)
        mentioned_bot = mentioned_bot or is_bot
        key = str(mention.get("key") or "")
        if key:
            text = text.replace(key, "" if is_bot else f"@{mention.get('name', '')}")
    chat_type: ChatType = "p2p" if message.get("chat_type") == "p2p" else "group"
    root_id = message.get("root_id") or message.get("thread_id")
    return ChannelMessage(
        platform=PLATFORM,
        adapter_id=binding.adapter_id,
        tenant_id=binding.tenant_id,
        worker_id=binding.worker_id,
        event_id=message_id,
        chat_id=chat_id,
        chat_type=chat_type,
        sender_id=sender_id,
        text=" ".join(text.split()),
        received_at=received_at.astimezone(UTC).isoformat(),
        thread_id=root_id if isinstance(root_id, str) and root_id else None,
        mentions=tuple(str((m.get("id") or {}).get("open_id") or m.get("name") or "") for m in mentions),
        mentioned_bot=mentioned_bot,
        attachments=attachments,
        reply_context={"message_id": message_id, "chat_id": chat_id},
    )


def _content(message: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]]:
    kind = str(message.get("message_type") or "")
    try:
        content = json.loads(str(message.get("content") or "{}"))
    except ValueError:
        raise malformed("json", "message.content is not valid JSON") from None
    if not isinstance(content, dict):
        raise malformed("json", "message.content must be a JSON object")
    match kind:
        case "text":
            return str(content.get("text") or ""), ()
        case "post":
            return _post_text(content), ()
        case "image":
            return "", (Attachment("image", None, None, None, str(content.get("image_key") or "")),)
        case "file" | "audio" | "media":
            name = content.get("file_name")
            return "", (
                Attachment(
                    kind, name if isinstance(name, str) else None, None, None, str(content.get("file_key") or "")
                ),
            )
        case _:
            return "", ()


def _post_text(content: dict[str, Any]) -> str:
    if "content" not in content:  # the older shape nests the post under a locale key
        first: Any = next(iter(content.values()), None)
        content = first if isinstance(first, dict) else {}
    body = content.get("content")
    parts = [str(content.get("title") or "")]
    for line in body if isinstance(body, list) else ():
        if isinstance(line, list):
            parts.append("".join(str(el.get("text") or "") for el in line if isinstance(el, dict)))
    return "\n".join(p for p in parts if p)
