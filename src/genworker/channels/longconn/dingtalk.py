"""DingTalk Stream mode through the `dingtalk-stream` SDK's own client.

`DingTalkStreamClient.open_connection` registers the bot-message topic with the app's Client ID
and Client Secret at `{DingTalk API}/v1.0/gateway/connections/open` (the SDK's
`OPEN_CONNECTION_API`, set from GENWORKER_DINGTALK_API_BASE) and gets an endpoint and a ticket;
this session opens that WebSocket and lets the client route every frame (`route_message`): system
frames (ping, disconnect) are answered by the SDK, a bot message reaches our callback handler,
whose answer becomes the SDK's ack frame. The ack says 200 only once the message is stored, else
an error code, so DingTalk sends it again. This mirrors the SDK's `start()` loop for one
connection: its own loop retries forever at a fixed pace and reports nothing, so the supervisor
does that part.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

from genworker.channels import dingtalk
from genworker.channels.errors import ChannelError
from genworker.channels.longconn.link import Link
from genworker.workspace.models.credentials import DingTalkCredentials

__all__ = ["OPEN_CONNECTION_PATH", "run"]

log = logging.getLogger("genworker.channels.longconn")

OPEN_CONNECTION_PATH = "/v1.0/gateway/connections/open"


async def run(link: Link) -> None:
    import websockets
    from dingtalk_stream import AckMessage, CallbackHandler, CallbackMessage, ChatbotMessage, Credential
    from dingtalk_stream.stream import DingTalkStreamClient

    creds = link.binding.credentials
    if not isinstance(creds, DingTalkCredentials):
        raise ValueError("CHANNEL_CREDENTIALS.json has no dingtalk client id and secret")
    adapter_id = link.binding.adapter_id

    class BotMessages(CallbackHandler):  # type: ignore[misc]
        async def process(self, message: CallbackMessage) -> tuple[int, str]:
            data = message.data
            try:
                ack = dingtalk.message_ack(link.binding, data if isinstance(data, dict) else {}, datetime.now(UTC))
            except ChannelError as exc:
                log.warning("[Channels] %s: Stream message refused: %s", adapter_id, exc.message)
                return AckMessage.STATUS_BAD_REQUEST, exc.message
            try:
                await link.take(ack)
            except Exception:
                log.exception("[Channels] %s: could not store a Stream message; DingTalk sends it again", adapter_id)
                return AckMessage.STATUS_SYSTEM_EXCEPTION, "not stored"
            return AckMessage.STATUS_OK, "OK"

    credential = Credential(creds.app_key.get_secret_value(), creds.app_secret.get_secret_value())
    client = DingTalkStreamClient(credential, log)
    client.register_callback_handler(ChatbotMessage.TOPIC, BotMessages())
    client.pre_start()
    # the SDK reads its endpoint from a class attribute (DINGTALK_OPENAPI_ENDPOINT at import)
    DingTalkStreamClient.OPEN_CONNECTION_API = link.endpoints.dingtalk + OPEN_CONNECTION_PATH
    connection: Any = await asyncio.to_thread(client.open_connection)  # blocking `requests` call
    if not isinstance(connection, dict) or not connection.get("endpoint") or not connection.get("ticket"):
        raise ConnectionError(f"{OPEN_CONNECTION_PATH} gave no endpoint (the dingtalk_stream log says why)")
    uri = f"{connection['endpoint']}?ticket={quote_plus(str(connection['ticket']))}"
    frames: set[asyncio.Task[None]] = set()
    try:
        async with websockets.connect(uri) as ws:
            client.websocket = ws
            link.connected()
            async for raw in ws:
                task = asyncio.create_task(client.background_task(json.loads(raw)))
                frames.add(task)
                task.add_done_callback(frames.discard)
    finally:
        if frames:  # messages being stored finish (their acks may no longer go out: DingTalk resends)
            await asyncio.gather(*frames, return_exceptions=True)
