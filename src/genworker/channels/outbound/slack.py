"""Slack: chat.postMessage and chat.update with the bot token (Web API, JSON bodies); auth.test.

Slack answers HTTP 200 with `{"ok": false, "error": ...}` for refusals and HTTP 429 with
`Retry-After` when rate limited (handled by `VendorHttp`). Messages in a thread carry
`thread_ts`; updates replace the text of a message the bot posted, which is how streaming
replies grow in place.
"""

from __future__ import annotations

from typing import Any

from genworker.channels.outbound.http import DeliveryError, VendorHttp, json_object
from genworker.channels.outbound.platform import Sent
from genworker.channels.outbound.text import chars
from genworker.delivery.messages import OutboundMessage, Target
from genworker.workspace.models.credentials import SlackCredentials

__all__ = ["SlackClient"]

TEXT_LIMIT = 4000  # Slack truncates past 40,000 characters and advises keeping text under 4,000


class SlackClient:
    platform = "slack"
    limit = TEXT_LIMIT
    measure = staticmethod(chars)
    can_update = True

    def __init__(self, credentials: SlackCredentials, http: VendorHttp, base_url: str) -> None:
        self._token = credentials.bot_token
        self._http = http
        self._base = base_url.rstrip("/")

    async def send(self, target: Target, outbound: OutboundMessage) -> Sent:
        body = {"channel": target.chat_id, **_content(outbound)}
        if target.thread_id:
            body["thread_ts"] = target.thread_id
        data, attempts = await self._call("chat.postMessage", body)
        return Sent(str(data.get("ts")) if data.get("ts") else None, attempts)

    async def update(self, target: Target, message_id: str, outbound: OutboundMessage) -> Sent:
        body = {"channel": target.chat_id, "ts": message_id, **_content(outbound)}
        _, attempts = await self._call("chat.update", body)
        return Sent(message_id, attempts)

    async def auth_test(self) -> dict[str, Any]:
        """`auth.test`: the team and bot user the token belongs to; DeliveryError when Slack refuses it."""
        data, _ = await self._call("auth.test", {})
        return data

    async def _call(self, method: str, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        headers = {"Authorization": f"Bearer {self._token.get_secret_value()}"}
        response, attempts = await self._http.request(
            "POST", f"{self._base}/{method}", platform=self.platform, body=body, headers=headers
        )
        data = json_object(response.content)
        if response.status_code != 200 or data.get("ok") is not True:
            error = data.get("error") or f"HTTP {response.status_code}"
            raise DeliveryError(f"slack {method}: {error}", status=response.status_code, attempts=attempts)
        return data, attempts


def _content(outbound: OutboundMessage) -> dict[str, Any]:
    content: dict[str, Any] = {"text": outbound.text, "mrkdwn": outbound.format != "text"}
    if outbound.format == "card" and outbound.card is not None:
        blocks = outbound.card.get("blocks")
        if isinstance(blocks, list):
            content["blocks"] = blocks  # `text` stays as the notification fallback
    return content
