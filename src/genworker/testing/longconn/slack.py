"""A hand-written Slack Socket Mode stand-in (docs.slack.dev, "Using Socket Mode").

`POST /apps.connections.open` with the app-level token as `Authorization: Bearer xapp-…` answers
`{"ok": true, "url": "ws://…/link/?ticket=…"}` (a bot token or a wrong one: `invalid_auth`). The
WebSocket greets with `{"type": "hello", …}`, carries envelopes `{"envelope_id", "type":
"events_api" | "interactive" | "slash_commands", "payload", "accepts_response_payload",
"retry_attempt", "retry_reason"}` and takes acks `{"envelope_id": …}`; `disconnect` envelopes ask
the client to reconnect. Its URL is the Slack Web API base (`GENWORKER_SLACK_API_BASE`), so
`chat.postMessage` replies are recorded by the mounted `Vendor`.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse

from genworker.testing.longconn.base import Connection, StandIn

__all__ = ["SlackSocketMode", "message_event"]


def message_event(text: str, ts: str, *, channel: str = "D1", user: str = "U_PEER", **event: Any) -> dict[str, Any]:
    """An Events API `event_callback` body for a message (a DM unless `channel_type` says otherwise)."""
    return {
        "type": "event_callback",
        "event_id": f"Ev{ts.replace('.', '')}",
        "team_id": "T0STANDIN",
        "authorizations": [{"is_bot": True, "user_id": "U0BOT"}],
        "event": {"type": "message", "user": user, "text": text, "channel": channel, "ts": ts,
                  "channel_type": "im", **event},
    }  # fmt: skip


class SlackSocketMode(StandIn):
    def __init__(self, app_token: str) -> None:
        super().__init__()
        self.app_token = app_token
        self._tickets = itertools.count(1)
        self._envelopes = itertools.count(1)

    def routes(self, app: FastAPI) -> None:
        @app.post("/apps.connections.open")
        async def open_connection(request: Request) -> JSONResponse:
            token = request.headers.get("authorization", "").removeprefix("Bearer ")
            with self.changed:
                self.opened.append({"token": token})
            if token != self.app_token or not token.startswith("xapp-"):
                return JSONResponse({"ok": False, "error": "invalid_auth"})
            ws = str(request.url_for("link")).replace("http:", "ws:", 1)
            return JSONResponse({"ok": True, "url": f"{ws}?ticket={next(self._tickets)}"})

        @app.websocket("/link/", name="link")
        async def link(socket: WebSocket) -> None:
            await self.serve_socket(socket, ticket=socket.query_params.get("ticket"))

    async def greet(self, connection: Connection) -> None:
        hello = {"type": "hello", "num_connections": 1, "debug_info": {"host": "standin"},
                 "connection_info": {"app_id": "A0STANDIN"}}  # fmt: skip
        await connection.socket.send_text(json.dumps(hello))

    def frame(self, connection: Connection, data: str | bytes) -> tuple[str, Any] | None:
        body = json.loads(data)
        if isinstance(body, dict) and isinstance(body.get("envelope_id"), str):
            return body["envelope_id"], body
        return None

    def push(self, payload: dict[str, Any], kind: str = "events_api", *, retry: int = 0, envelope: str = "") -> str:
        """Send an envelope; its id (an ack names it)."""
        envelope = envelope or f"env-{next(self._envelopes)}"
        frame = {"envelope_id": envelope, "type": kind, "payload": payload,
                 "accepts_response_payload": kind != "events_api", "retry_attempt": retry,
                 "retry_reason": "timeout" if retry else ""}  # fmt: skip
        self.send(json.dumps(frame))
        return envelope

    def ask_to_reconnect(self) -> None:
        """A `disconnect` envelope (`refresh_requested`): the client opens a new connection itself."""
        self.send(json.dumps({"type": "disconnect", "reason": "refresh_requested", "debug_info": {"host": "standin"}}))
