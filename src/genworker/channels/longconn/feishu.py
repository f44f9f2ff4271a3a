"""Feishu / Lark long connection through lark-oapi's own WebSocket client (`lark_oapi.ws.Client`).

The client posts the app id and secret to `{domain}/callback/ws/endpoint` (domain: the configured
Feishu API base, e.g. Lark's `https://open.larksuite.com`), connects to the URL it gets, and speaks
Feishu's protobuf frames: pings, and event frames it hands to an event handler and answers with a
response frame. The response is the ack: 200 once our handler returns, 500 when it raises, and
Feishu sends an unacknowledged event again. Our handler turns the event into the webhook's
`ChannelMessage` and returns only once it is stored.

lark-oapi's client is built around a blocking `start()` on a module-level event loop, with a
synchronous handler. So each session runs the client's own coroutines (`_connect`, its receive
loop, `_ping_loop`) on a loop of its own in a thread; the handler waits (in that thread) for the
runtime's loop to store the message. The module's loop is replaced by one that stands for whichever
loop is running, so each session's tasks stay on its own loop. The SDK's reconnect hook ends the
session instead of reconnecting by itself: the supervisor reconnects, with backoff, under its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from genworker.channels import feishu
from genworker.channels.errors import ChannelError
from genworker.channels.longconn.link import Link
from genworker.workspace.models.credentials import FeishuCredentials

__all__ = ["STORE_TIMEOUT_S", "in_own_thread", "run"]

log = logging.getLogger("genworker.channels.longconn")

STORE_TIMEOUT_S = 60.0
T = TypeVar("T")


class _RunningLoop:
    """lark_oapi.ws.client's module-level `loop`: whichever loop runs the calling coroutine, or the
    SDK's own loop for callers outside any (it stays the module's `loop` for everyone else)."""

    def __init__(self, fallback: Any) -> None:
        self._fallback = fallback

    def __getattr__(self, name: str) -> Any:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = self._fallback
        return getattr(loop, name)


async def in_own_thread(work: Callable[[], Awaitable[T]], name: str) -> T:
    """`work()` on a new event loop in its own thread; cancelling the caller cancels it there (and
    waits for it to finish)."""
    main = asyncio.get_running_loop()
    done: asyncio.Future[T] = main.create_future()
    started = threading.Event()
    there: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[T]]] = []

    async def body() -> T:
        task = asyncio.current_task()
        assert task is not None
        there.append((asyncio.get_running_loop(), task))
        started.set()
        return await work()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = asyncio.run(body())
        except BaseException as exc:  # handed to the caller's loop
            started.set()
            error: BaseException | None = exc
            result = None
        else:
            error = None
        with contextlib.suppress(RuntimeError):  # else the caller's loop is closed
            main.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name=name, daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.to_thread(started.wait)
        if there:
            loop, task = there[0]
            loop.call_soon_threadsafe(task.cancel)
        with contextlib.suppress(BaseException):  # its own end, whatever it is: we were cancelled
            await done
        raise


async def run(link: Link) -> None:
    import lark_oapi.ws.client as lark_ws

    creds = link.binding.credentials
    if not isinstance(creds, FeishuCredentials):
        raise ValueError("CHANNEL_CREDENTIALS.json has no feishu app_id and app_secret")
    main = asyncio.get_running_loop()
    adapter_id = link.binding.adapter_id

    class Events:
        """lark's event handler interface: the raw payload of each event frame."""

        def _do_without_validation(self, payload: bytes) -> None:
            try:
                data = json.loads(payload)
                ack = feishu.event_ack(link.binding, data if isinstance(data, dict) else {}, datetime.now(UTC))
            except (ValueError, ChannelError) as exc:  # acked: sending it again would not help
                log.warning("[Channels] %s: long-connection event refused: %s", adapter_id, exc)
                return None
            # raises when not stored: the SDK answers 500 and Feishu sends the event again
            asyncio.run_coroutine_threadsafe(link.take(ack), main).result(STORE_TIMEOUT_S)
            return None

    class Client(lark_ws.Client):  # type: ignore[misc]
        lost: asyncio.Event

        async def _reconnect(self) -> None:  # the receive loop ended: this session is over
            self.lost.set()

    async def serve() -> None:
        if not isinstance(lark_ws.loop, _RunningLoop):
            lark_ws.loop = _RunningLoop(lark_ws.loop)
        client = Client(
            creds.app_id.get_secret_value(),
            creds.app_secret.get_secret_value(),
            event_handler=Events(),
            domain=link.endpoints.feishu,
            auto_reconnect=True,  # so its receive loop calls `_reconnect` when the connection ends
        )
        client.lost = asyncio.Event()
        ping: asyncio.Task[None] | None = None
        try:
            await client._connect()  # blocking endpoint request first: this loop is this session's own
            main.call_soon_threadsafe(link.connected)
            ping = asyncio.create_task(client._ping_loop())
            await client.lost.wait()
        finally:
            if ping is not None:
                ping.cancel()
            await client._disconnect()

    await in_own_thread(serve, f"feishu-ws:{adapter_id}")
