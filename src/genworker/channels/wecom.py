"""WeCom (企业微信) inbound: self-built app callbacks, always encrypted and signed.

GET (URL verification): `msg_signature` = SHA-1 over the sorted token, timestamp, nonce and
`echostr`; the decrypted echostr is the answer. POST: the XML body's `<Encrypt>` is checked
the same way, then decrypted in-process (AES-256-CBC, IV = key[:16], PKCS#7 to 32-byte
blocks) and the receive id inside must be the app's corp id (403 otherwise). `msg_signature`
is mandatory: there is no unsigned mode. XML with a DTD (DOCTYPE, entities) is refused by the parser
itself (`defusedxml`), whatever the document's encoding, before any signature work.

A text / image / file message becomes a `ChannelMessage` keyed by `MsgId` (WeCom gives 5 s and
retries three times with the same id); app-message chats are one-to-one with the sender.
"""

from __future__ import annotations

import hmac
from datetime import UTC
from xml.etree.ElementTree import ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from genworker.channels.base import Attachment, ChannelMessage, InboundAck, InboundRequest
from genworker.channels.crypto import wecom_decrypt, wecom_key, wecom_signature
from genworker.channels.errors import ChannelConfigError, VerificationError, check_window, malformed
from genworker.channels.registry import ChannelBinding
from genworker.workspace.models.credentials import WeComCredentials

__all__ = ["PLATFORM", "REPLAY_WINDOW_S", "parse", "parse_xml"]

PLATFORM = "wecom"
REPLAY_WINDOW_S = 24 * 3600  # signed requests older than this are refused; younger ones meet the dedupe store


def parse_xml(body: bytes, what: str = "body") -> dict[str, str]:
    """A flat `<xml><Name>value</Name>...</xml>` document as {name: text}; a DTD is refused by the
    parser, so no byte-level check can be dodged with another encoding (UTF-16, a BOM, ...)."""
    try:
        root = fromstring(body, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException:
        raise malformed("xml", f"the {what} declares a DOCTYPE or entity: refused") from None
    except ParseError as exc:
        raise malformed("xml", f"the {what} is not valid XML: {exc}") from None
    return {child.tag: (child.text or "") for child in root}


def _credentials(binding: ChannelBinding) -> tuple[str, bytes, str]:
    creds = binding.credentials
    if not isinstance(creds, WeComCredentials) or creds.token is None or creds.encoding_aes_key is None:
        raise ChannelConfigError(
            f"{binding.adapter_id}: CHANNEL_CREDENTIALS.json needs wecom.token and wecom.encoding_aes_key"
        )
    return (
        creds.token.get_secret_value(),
        wecom_key(creds.encoding_aes_key.get_secret_value()),
        creds.corpid.get_secret_value(),
    )


def _query(req: InboundRequest, name: str) -> str:
    value = req.query.get(name, "")
    if not value:
        raise VerificationError("missing_parameter", f"the {name} query parameter is missing", code="missing_parameter")
    return value


def _open(req: InboundRequest, token: str, key: bytes, corp_id: str, ciphertext: str) -> bytes:
    signature, timestamp = _query(req, "msg_signature"), _query(req, "timestamp")
    expected = wecom_signature(token, timestamp, _query(req, "nonce"), ciphertext)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise VerificationError("signature", "msg_signature does not match")
    check_window(timestamp, req.received_at.timestamp(), REPLAY_WINDOW_S, "timestamp")
    plain, receive_id = wecom_decrypt(key, ciphertext)
    if not hmac.compare_digest(receive_id.encode(), corp_id.encode()):
        raise VerificationError("corp_id", "the message is for another corp id", status=403, code="wrong_corp_id")
    return plain


def parse(binding: ChannelBinding, req: InboundRequest) -> InboundAck:
    token, key, corp_id = _credentials(binding)
    if req.method == "GET":
        echo = _open(req, token, key, corp_id, _query(req, "echostr"))
        return InboundAck(body=echo, media_type="text/plain")
    outer = parse_xml(req.body)
    ciphertext = outer.get("Encrypt", "")
    if not ciphertext:
        raise malformed("xml", "the body has no <Encrypt> element")
    fields = parse_xml(_open(req, token, key, corp_id, ciphertext), "decrypted message")
    kind = fields.get("MsgType", "")
    if kind not in ("text", "image", "file", "voice", "video"):
        return InboundAck(body=b"", media_type="text/plain", note=f"MsgType {kind!r} not handled")
    sender, msg_id = fields.get("FromUserName", ""), fields.get("MsgId", "")
    if not sender or not msg_id:
        raise malformed("xml", "the message has no FromUserName or MsgId")
    attachments: tuple[Attachment, ...] = ()
    if kind != "text":
        ref = fields.get("PicUrl") or fields.get("MediaId", "")
        attachments = (Attachment(kind, fields.get("FileName") or None, None, None, ref),)
    message = ChannelMessage(
        platform=PLATFORM,
        adapter_id=binding.adapter_id,
        tenant_id=binding.tenant_id,
        worker_id=binding.worker_id,
        event_id=msg_id,
        chat_id=sender,
        chat_type="p2p",
        sender_id=sender,
        text=fields.get("Content", "").strip(),
        received_at=req.received_at.astimezone(UTC).isoformat(),
        attachments=attachments,
        reply_context={"to_user": sender, "agent_id": fields.get("AgentID", "")},
    )
    return InboundAck(message, body=b"", media_type="text/plain")
