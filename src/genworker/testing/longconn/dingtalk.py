"""A hand-written DingTalk Stream-mode stand-in (open.dingtalk.com, "Stream mode" protocol).

`POST /v1.0/gateway/connections/open` with `{"clientId", "clientSecret", "subscriptions": [{"type":
"CALLBACK", "topic": "/v1.0/im/bot/messages/get"}, …], "ua", "localIp"}` answers `{"endpoint":
"ws://…/gateway", "ticket": …}` (wrong credentials: 401). The WebSocket, opened with `?ticket=`
(each ticket once), carries JSON frames `{"specVersion": "1.0", "type": "CALLBACK" | "EVENT" |
"SYSTEM", "headers": {"messageId", "topic", "contentType", "time", …}, "data": "<JSON text>"}`; the
client acks each with `{"code": 200, "headers": {"messageId", "contentType"}, "message", "data"}`
(another code: DingTalk sends the message again). A bot message's `sessionWebhook` points back at
this server (`/robot/sendBySession`), where the mounted `Vendor` records the reply.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse

from genworker.testing.longconn.base import Connection, StandIn

__all__ = ["BOT_TOPIC", "DingTalkStream", "bot_message"]

BOT_TOPIC = "/v1.0/im/bot/messages/get"


def bot_message(text: str, msg_id: str, session_webhook: str, *, conversation: str = "cid-p2p",
                sender: str = "staff-1", group: bool = False) -> dict[str, Any]:  # fmt: skip
    """The data of a robot message, as DingTalk's Stream mode delivers it."""
    return {
        "conversationId": conversation, "chatbotCorpId": "ding-corp", "chatbotUserId": "bot-user",
        "msgId": msg_id, "senderNick": "Peer", "isAdmin": False, "senderStaffId": sender,
        "sessionWebhookExpiredTime": int(time.time() * 1000) + 3_600_000, "createAt": int(time.time() * 1000),
        "senderCorpId": "ding-corp", "conversationType": "2" if group else "1", "senderId": f"$:{sender}",
        "sessionWebhook": session_webhook, "robotCode": "ding-robot", "msgtype": "text",
        "text": {"content": text}, "isInAtList": group,
    }  # fmt: skip


class DingTalkStream(StandIn):
    def __init__(self, client_id: str, client_secret: str) -> None:
        super().__init__()
        self.client_id, self.client_secret = client_id, client_secret
        self.tickets: dict[str, bool] = {}  # ticket: used
        self._counter = itertools.count(1)

    def routes(self, app: FastAPI) -> None:
        @app.post("/v1.0/gateway/connections/open")
        async def open_connection(request: Request) -> JSONResponse:
            body = await request.json()
            with self.changed:
                self.opened.append(body)
            if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
                return JSONResponse({"code": "InvalidAuthentication", "message": "clientId or clientSecret"}, 401)
            topics = {(s.get("type"), s.get("topic")) for s in body.get("subscriptions") or ()}
            if ("CALLBACK", BOT_TOPIC) not in topics:
                return JSONResponse({"code": "InvalidSubscription", "message": f"no CALLBACK {BOT_TOPIC}"}, 400)
            ticket = f"tk-{uuid.uuid4().hex[:10]}"
            with self.changed:
                self.tickets[ticket] = False
            ws = str(request.url_for("gateway")).replace("http:", "ws:", 1)
            return JSONResponse({"endpoint": ws, "ticket": ticket})

        @app.websocket("/gateway", name="gateway")
        async def gateway(socket: WebSocket) -> None:
            ticket = socket.query_params.get("ticket", "")
            with self.changed:
                valid = self.tickets.get(ticket) is False
                if valid:
                    self.tickets[ticket] = True
            if not valid:
                await socket.close(code=4401)
                return
            await self.serve_socket(socket, ticket=ticket)

    def frame(self, connection: Connection, data: str | bytes) -> tuple[str, Any] | None:
        body = json.loads(data)
        headers = body.get("headers") if isinstance(body, dict) else None
        if isinstance(headers, dict) and "code" in body and isinstance(headers.get("messageId"), str):
            return headers["messageId"], body
        return None

    def push(
        self, data: dict[str, Any], *, topic: str = BOT_TOPIC, kind: str = "CALLBACK", message_id: str = ""
    ) -> str:
        """Send a frame; its message id (the ack carries it back)."""
        message_id = message_id or f"mid-{next(self._counter)}-{uuid.uuid4().hex[:6]}"
        headers = {"appId": "app-standin", "connectionId": "conn-standin", "contentType": "application/json",
                   "messageId": message_id, "time": str(int(time.time() * 1000)), "topic": topic}  # fmt: skip
        self.send(json.dumps({"specVersion": "1.0", "type": kind, "headers": headers, "data": json.dumps(data)}))
        return message_id

    def ping(self) -> str:
        """A SYSTEM ping the client must answer (with the opaque value back)."""
        return self.push({"opaque": "ping-1"}, topic="ping", kind="SYSTEM")
