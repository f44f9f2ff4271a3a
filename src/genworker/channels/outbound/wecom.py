"""WeCom (企业微信): application messages with a cached access_token.

One-to-one chats go through `message/send` (touser + agentid), group chats the app created
through `appchat/send` (chatid). WeCom has no way to edit a sent message, so streaming
replies arrive as consecutive chunks. A refusal is HTTP 200 with a non-zero `errcode`.
"""

from __future__ import annotations

from typing import Any

from genworker.channels.outbound.http import DeliveryError, VendorHttp, json_object
from genworker.channels.outbound.platform import Sent
from genworker.channels.outbound.text import utf8_bytes
from genworker.channels.outbound.tokens import TokenCache
from genworker.delivery.messages import OutboundMessage, Target
from genworker.workspace.models.credentials import WeComCredentials

__all__ = ["WeComClient"]

CONTENT_LIMIT = 2048  # bytes of text.content / markdown.content
_TOKEN_INVALID = {40001, 40014, 42001}


class WeComClient:
    platform = "wecom"
    limit = CONTENT_LIMIT
    measure = staticmethod(utf8_bytes)
    can_update = False

    def __init__(self, credentials: WeComCredentials, http: VendorHttp, base_url: str) -> None:
        self._credentials = credentials
        self._http = http
        self._base = base_url.rstrip("/")
        self.tokens = TokenCache(self._fetch_token)

    async def _fetch_token(self) -> tuple[str, float]:
        params = {
            "corpid": self._credentials.corpid.get_secret_value(),
            "corpsecret": self._credentials.corpsecret.get_secret_value(),
        }
        url = f"{self._base}/cgi-bin/gettoken"
        response, attempts = await self._http.request("GET", url, platform=self.platform, params=params)
        data = json_object(response.content)
        token = data.get("access_token")
        if data.get("errcode", 0) != 0 or not isinstance(token, str):
            raise DeliveryError(
                f"wecom gettoken: errcode {data.get('errcode')} {data.get('errmsg', '')}".rstrip(),
                status=response.status_code,
                attempts=attempts,
            )
        return token, float(data.get("expires_in", 7200))

    async def send(self, target: Target, outbound: OutboundMessage) -> Sent:
        content = _content(outbound)
        if target.chat_type == "group":
            path, body = "/cgi-bin/appchat/send", {"chatid": target.chat_id, **content, "safe": 0}
        else:
            body = {
                "touser": target.user_id or target.chat_id,
                "agentid": _agent_id(self._credentials),
                **content,
                "safe": 0,
            }
            path = "/cgi-bin/message/send"
        data, attempts = await self._call(path, body)
        msgid = data.get("msgid")
        return Sent(str(msgid) if msgid else None, attempts)

    async def update(self, target: Target, message_id: str, outbound: OutboundMessage) -> Sent:
        raise DeliveryError("wecom cannot edit a sent message")

    async def _call(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        total = 0
        for _ in range(2):
            token = await self.tokens.get()
            response, attempts = await self._http.request(
                "POST", f"{self._base}{path}", platform=self.platform, body=body, params={"access_token": token}
            )
            total += attempts
            data = json_object(response.content)
            errcode = data.get("errcode")
            if errcode == 0 and response.status_code == 200:
                return data, total
            if errcode in _TOKEN_INVALID:
                self.tokens.invalidate(token)
                continue
            raise DeliveryError(
                f"wecom {path}: errcode {errcode} {data.get('errmsg', '')}".rstrip(),
                status=response.status_code,
                attempts=total,
            )
        raise DeliveryError("wecom: access_token rejected twice", attempts=total)


def _agent_id(credentials: WeComCredentials) -> int | str:
    if credentials.agent_id is None:
        raise DeliveryError("wecom: no agent_id in CHANNEL_CREDENTIALS.json; direct messages need it", attempts=0)
    raw = credentials.agent_id.get_secret_value()
    return int(raw) if raw.isdigit() else raw


def _content(outbound: OutboundMessage) -> dict[str, Any]:
    if outbound.format == "text":
        return {"msgtype": "text", "text": {"content": outbound.text}}
    return {"msgtype": "markdown", "markdown": {"content": outbound.text}}
