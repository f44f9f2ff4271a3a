"""X-Request-ID in and out: every HTTP request gets an id that its log lines and its response carry.

A well-formed incoming `X-Request-ID` (up to 128 of `A-Za-z0-9._:-`) is kept so a proxy's id
threads through; anything else is replaced by a fresh one. Pure ASGI, so streamed (SSE)
responses pass through untouched.
"""

from __future__ import annotations

import re
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from genworker.observability.logging import bind

__all__ = ["HEADER", "RequestIdMiddleware", "request_id_of"]

HEADER = "x-request-id"
_VALID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def request_id_of(raw: str | None) -> str:
    """The id to use for a request that sent `raw` (None: no header)."""
    if raw is not None and _VALID.fullmatch(raw):
        return raw
    return uuid.uuid4().hex


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = next((v.decode("latin-1") for k, v in scope["headers"] if k == HEADER.encode()), None)
        request_id = request_id_of(raw)
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER.encode()]
                headers.append((HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        with bind(request_id=request_id):
            await self.app(scope, receive, send_with_id)
