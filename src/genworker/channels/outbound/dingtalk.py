"""DingTalk: robot replies through the message's sessionWebhook, else the robot OpenAPI.

A received message carries a short-lived `sessionWebhook` (in `reply_context`, with its
expiry in epoch milliseconds); replies go there while it is valid. Otherwise, and for
proactive messages, the robot sends with a cached app access token: `oToMessages/batchSend`
to a person, `groupMessages/send` to a group conversation. DingTalk cannot edit robot
messages, so streaming replies arrive as chunks. A sessionWebhook is only ever called on the
configured DingTalk OpenAPI host, so a forged callback cannot make us POST elsewhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import httpx

from genworker.channels.outbound.http import DeliveryError, VendorHttp, json_object
from genworker.channels.outbound.platform import Sent
from genworker.channels.outbound.text import chars
from genworker.channels.outbound.tokens import TokenCache
from genworker.delivery.messages import OutboundMessage, Target
from genworker.workspace.models.credentials import DingTalkCredentials

__all__ = ["DingTalkClient", "session_webhook"]

TEXT_LIMIT = 5000


def session_webhook(context: Mapping[str, str], now_ms: float | None = None) -> str | None:
    """The message's sessionWebhook while it is valid."""
    url = context.get("session_webhook") or context.get("sessionWebhook")
    if not url:
        return None
    expires = (
        context.get("session_webhook_expires_ms")
        or context.get("session_webhook_expires")
        or context.get("sessionWebhookExpiredTime")
    )
    now = time.time() * 1000 if now_ms is None else now_ms
    if expires and expires.isdigit() and int(expires) <= now:
        return None
    return url


class DingTalkClient:
    platform = "dingtalk"
    limit = TEXT_LIMIT
    measure = staticmethod(chars)
    can_update = False

    def __init__(self, credentials: DingTalkCredentials, http: VendorHttp, base_url: str, oapi_url: str) -> None:
        self._credentials = credentials
        self._http = http
        self._base = base_url.rstrip("/")
        self._oapi = httpx.URL(oapi_url)
        self.tokens = TokenCache(self._fetch_token)

    async def _fetch_token(self) -> tuple[str, float]:
        body = {
            "appKey": self._credentials.app_key.get_secret_value(),
            "appSecret": self._credentials.app_secret.get_secret_value(),
        }
        response, attempts = await self._http.request(
            "POST", f"{self._base}/v1.0/oauth2/accessToken", platform=self.platform, body=body
        )
        data = json_object(response.content)
        token = data.get("accessToken")
        if response.status_code != 200 or not isinstance(token, str):
            raise DeliveryError(
                f"dingtalk accessToken: HTTP {response.status_code} {data.get('code', '')} {data.get('message', '')}",
                status=response.status_code,
                attempts=attempts,
            )
        return token, float(data.get("expireIn", 7200))

    async def send(self, target: Target, outbound: OutboundMessage) -> Sent:
        webhook = session_webhook(target.context)
        if webhook is not None:
            return await self._reply(webhook, outbound)
        key, param = _template(outbound)
        robot = (self._credentials.robot_code or self._credentials.app_key).get_secret_value()
        body: dict[str, Any] = {"robotCode": robot, "msgKey": key, "msgParam": json.dumps(param, ensure_ascii=False)}
        if target.chat_type == "group":
            path = "/v1.0/robot/groupMessages/send"
            body["openConversationId"] = target.chat_id
        else:
            path = "/v1.0/robot/oToMessages/batchSend"
            body["userIds"] = [target.user_id or target.chat_id]
        data, attempts = await self._call(path, body)
        key_id = data.get("processQueryKey")
        return Sent(str(key_id) if key_id else None, attempts)

    async def update(self, target: Target, message_id: str, outbound: OutboundMessage) -> Sent:
        raise DeliveryError("dingtalk cannot edit a robot message")

    async def _reply(self, webhook: str, outbound: OutboundMessage) -> Sent:
        url = httpx.URL(webhook)
        if (url.scheme, url.host, url.port) != (self._oapi.scheme, self._oapi.host, self._oapi.port):
            raise DeliveryError(f"dingtalk sessionWebhook is not on {self._oapi.host}: refused")
        if outbound.format == "text":
            body: dict[str, Any] = {"msgtype": "text", "text": {"content": outbound.text}}
        else:
            body = {"msgtype": "markdown", "markdown": {"title": _title(outbound.text), "text": outbound.text}}
        response, attempts = await self._http.request("POST", webhook, platform=self.platform, body=body)
        data = json_object(response.content)
        if response.status_code != 200 or data.get("errcode", 0) != 0:
            raise DeliveryError(
                f"dingtalk sessionWebhook: errcode {data.get('errcode')} {data.get('errmsg', '')}".rstrip(),
                status=response.status_code,
                attempts=attempts,
            )
        return Sent(None, attempts)

    async def _call(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        total = 0
        for _ in range(2):
            token = await self.tokens.get()
            response, attempts = await self._http.request(
                "POST",
                f"{self._base}{path}",
                platform=self.platform,
                body=body,
                headers={"x-acs-dingtalk-access-token": token},
            )
            total += attempts
            data = json_object(response.content)
            if response.status_code == 200:
                return data, total
            if response.status_code == 401 or data.get("code") == "InvalidAuthentication":
                self.tokens.invalidate(token)
                continue
            detail = f"{data.get('code', '')} {data.get('message', '')}".strip()
            raise DeliveryError(
                f"dingtalk {path}: HTTP {response.status_code} {detail}".rstrip(),
                status=response.status_code,
                attempts=total,
            )
        raise DeliveryError("dingtalk: access token rejected twice", attempts=total)


def _template(outbound: OutboundMessage) -> tuple[str, dict[str, str]]:
    if outbound.format == "text":
        return "sampleText", {"content": outbound.text}
    return "sampleMarkdown", {"title": _title(outbound.text), "text": outbound.text}


def _title(text: str) -> str:
    first = next((line.strip("# ").strip() for line in text.splitlines() if line.strip()), "")
    return first[:40] or "message"
