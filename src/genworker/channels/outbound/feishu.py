"""Feishu / Lark: IM v1 messages with a cached tenant_access_token.

Text goes out as `msg_type: text`; markdown and cards as interactive cards, the only kind of
message Feishu lets a bot PATCH afterwards, so streaming replies are cards. A reply to a
received message uses the reply API (in the thread when the message was in one). `content`
is itself a JSON string, encoded with json like the body around it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from genworker.channels.outbound.http import DeliveryError, VendorHttp, json_object
from genworker.channels.outbound.platform import Sent
from genworker.channels.outbound.text import utf8_bytes
from genworker.channels.outbound.tokens import TokenCache
from genworker.delivery.messages import OutboundMessage, Target
from genworker.workspace.models.credentials import FeishuCredentials

__all__ = ["FeishuClient"]

BODY_LIMIT = 28_000  # bytes of text per message: cards are capped at 30 KB, text at 150 KB
_TOKEN_INVALID = {99991661, 99991663, 99991668}


class FeishuClient:
    platform = "feishu"
    limit = BODY_LIMIT
    measure = staticmethod(utf8_bytes)
    can_update = True  # interactive cards only; `stream_format` makes streaming replies cards
    stream_format = "markdown"

    def __init__(self, credentials: FeishuCredentials, http: VendorHttp, base_url: str) -> None:
        self._credentials = credentials
        self._http = http
        self._base = base_url.rstrip("/")
        self.tokens = TokenCache(self._fetch_token)

    async def _fetch_token(self) -> tuple[str, float]:
        body = {
            "app_id": self._credentials.app_id.get_secret_value(),
            "app_secret": self._credentials.app_secret.get_secret_value(),
        }
        url = f"{self._base}/open-apis/auth/v3/tenant_access_token/internal"
        response, attempts = await self._http.request("POST", url, platform=self.platform, body=body)
        data = json_object(response.content)
        token = data.get("tenant_access_token")
        if data.get("code") != 0 or not isinstance(token, str):
            raise DeliveryError(
                f"feishu tenant_access_token: code {data.get('code')} {data.get('msg', '')}".rstrip(),
                status=response.status_code,
                attempts=attempts,
            )
        return token, float(data.get("expire", 7200))

    async def send(self, target: Target, outbound: OutboundMessage) -> Sent:
        msg_type, content = _content(outbound)
        if target.reply_to:
            body: dict[str, Any] = {
                "msg_type": msg_type,
                "content": content,
                "reply_in_thread": bool(target.thread_id),
                "uuid": outbound.key or str(uuid.uuid4()),  # Feishu sends one message per uuid within 1 h
            }
            data, attempts = await self._call("POST", f"/open-apis/im/v1/messages/{target.reply_to}/reply", body)
        else:
            key = outbound.key or str(uuid.uuid4())
            body = {"receive_id": target.chat_id, "msg_type": msg_type, "content": content, "uuid": key}
            params = {"receive_id_type": receive_id_type(target.chat_id)}
            data, attempts = await self._call("POST", "/open-apis/im/v1/messages", body, params)
        message_id = (data.get("data") or {}).get("message_id")
        return Sent(str(message_id) if message_id else None, attempts)

    async def update(self, target: Target, message_id: str, outbound: OutboundMessage) -> Sent:
        card = outbound if outbound.format != "text" else OutboundMessage(outbound.text, "markdown")
        _, content = _content(card)
        _, attempts = await self._call("PATCH", f"/open-apis/im/v1/messages/{message_id}", {"content": content})
        return Sent(message_id, attempts)

    async def _call(
        self, method: str, path: str, body: dict[str, Any], params: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], int]:
        total = 0
        for _ in range(2):  # one more try with a fresh token when Feishu says ours is invalid
            token = await self.tokens.get()
            response, attempts = await self._http.request(
                method,
                f"{self._base}{path}",
                platform=self.platform,
                body=body,
                params=params,
                headers={"Authorization": f"Bearer {token}"},
            )
            total += attempts
            data = json_object(response.content)
            code = data.get("code")
            if code == 0 and response.status_code == 200:
                return data, total
            if code in _TOKEN_INVALID:
                self.tokens.invalidate(token)
                continue
            raise DeliveryError(
                f"feishu {method} {path.split('/messages')[0]}/messages: code {code} {data.get('msg', '')}".rstrip(),
                status=response.status_code,
                attempts=total,
            )
        raise DeliveryError("feishu: tenant_access_token rejected twice", attempts=total)


def receive_id_type(receive_id: str) -> str:
    if receive_id.startswith("ou_"):
        return "open_id"
    if receive_id.startswith("on_"):
        return "union_id"
    if "@" in receive_id:
        return "email"
    return "chat_id"


def _content(outbound: OutboundMessage) -> tuple[str, str]:
    if outbound.format == "card" and outbound.card is not None:
        return "interactive", json.dumps(dict(outbound.card), ensure_ascii=False)
    if outbound.format in ("markdown", "card"):
        card = {"config": {"wide_screen_mode": True}, "elements": [{"tag": "markdown", "content": outbound.text}]}
        return "interactive", json.dumps(card, ensure_ascii=False)
    return "text", json.dumps({"text": outbound.text}, ensure_ascii=False)
