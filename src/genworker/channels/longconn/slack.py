"""Slack Socket Mode through slack_sdk's own client (`slack_sdk.socket_mode.websockets`).

The client asks `apps.connections.open` (with the app-level token `xapp-…`, on the configured Slack
API base) for a WebSocket URL and connects. Every envelope (`events_api`, `interactive`,
`slash_commands`) becomes the same `ChannelMessage` a webhook would, through the webhook's own
parsers; the envelope is acked (`{"envelope_id": …}`) only once its message is stored, so an event
that could not be stored is sent again by Slack. A `disconnect` envelope (Slack refreshing the
connection) is followed by the SDK itself; a connection that ends otherwise ends the session and
the supervisor reconnects.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from genworker.channels import slack
from genworker.channels.base import InboundAck
from genworker.channels.errors import ChannelError
from genworker.channels.longconn.link import Link
from genworker.workspace.models.credentials import SlackCredentials

__all__ = ["PING_INTERVAL_S", "run", "to_ack"]

log = logging.getLogger("genworker.channels.longconn")

PING_INTERVAL_S = 10.0


def to_ack(link: Link, kind: str, payload: dict[str, Any]) -> InboundAck | None:
    """The envelope's payload as the webhook's parser reads it; None for a kind we do not handle."""
    now = datetime.now(UTC)
    match kind:
        case "events_api":
            return slack.event_ack(link.binding, payload, now)
        case "interactive":
            return slack.interaction_ack(link.binding, payload, now)
        case "slash_commands":
            return slack.slash_ack(link.binding, payload, now)
        case _:
            return None


async def run(link: Link) -> None:
    from slack_sdk.socket_mode.request import SocketModeRequest
    from slack_sdk.socket_mode.response import SocketModeResponse
    from slack_sdk.socket_mode.websockets import SocketModeClient
    from slack_sdk.web.async_client import AsyncWebClient

    creds = link.binding.credentials
    if not isinstance(creds, SlackCredentials) or creds.app_token is None:
        raise ValueError("CHANNEL_CREDENTIALS.json has no slack.app_token")
    adapter_id = link.binding.adapter_id

    async def on_request(client: Any, request: SocketModeRequest) -> None:
        try:
            ack = to_ack(link, request.type, request.payload)
        except ChannelError as exc:  # sending it again would not help: acked, logged
            log.warning("[Channels] %s: Socket Mode %s envelope refused: %s", adapter_id, request.type, exc.message)
            ack = None
        if ack is not None:
            try:
                await link.take(ack)
            except Exception:
                log.exception("[Channels] %s: could not store a Socket Mode event; not acked", adapter_id)
                return
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

    client = SocketModeClient(
        creds.app_token.get_secret_value(),
        logger=log,
        web_client=AsyncWebClient(base_url=link.endpoints.slack + "/", logger=log),
        auto_reconnect_enabled=False,  # the supervisor reconnects, with backoff, while it holds the lease
        ping_interval=PING_INTERVAL_S,
    )
    client.socket_mode_request_listeners.append(on_request)
    try:
        await client.connect()  # type: ignore[no-untyped-call]
        link.connected()
        while True:
            session = client.current_session
            if session is None:
                return
            await session.wait_closed()
            if client.current_session is session or not await client.is_connected():
                return  # lost, not replaced by the SDK after a `disconnect` envelope
            link.connected()  # Slack refreshed the connection: a reconnect
    finally:
        await client.close()  # type: ignore[no-untyped-call]
