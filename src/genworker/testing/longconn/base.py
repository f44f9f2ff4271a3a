"""What every long-connection stand-in shares: one local server that answers the vendor's
"open a connection" HTTP call, accepts the WebSocket it hands out, and serves the vendor's reply
API too (the recording `Vendor` app, mounted under everything else), so one base URL stands for
the vendor as the SDK and our outbound client both see it.

No real vendor can be reached from the tests: these servers are hand-written from the vendors'
published protocols. Tests drive them from their own thread: `push` sends a frame on the open
connection, `wait` blocks on a condition (a connection, an ack) with a timeout, `drop` closes the
connection in the middle of the stream, `lose_next_ack` makes the next ack vanish with its
connection (so the vendor sends that event again, as it does for an event it never saw acked).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect

from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

__all__ = ["Ack", "Connection", "StandIn"]


@dataclass
class Connection:
    number: int
    socket: WebSocket
    loop: asyncio.AbstractEventLoop
    open: bool = True
    info: dict[str, Any] = field(default_factory=dict)  # what the connection was opened with (ticket, ...)


@dataclass(frozen=True)
class Ack:
    delivery: str  # the id of the pushed frame (envelope id, message id)
    connection: int
    body: Any  # the ack as the stand-in decoded it
    lost: bool = False  # dropped with its connection before the vendor "saw" it


class StandIn:
    """Subclasses route the vendor's endpoints (`routes`) and speak its frames (`greet`, `frame`)."""

    def __init__(self) -> None:
        self.vendor = Vendor()
        self.url = ""
        self.changed = threading.Condition()
        self.connections: list[Connection] = []
        self.acks: list[Ack] = []
        self.received: list[tuple[int, Any]] = []  # every other frame the clients sent (pings, ...)
        self.opened: list[dict[str, Any]] = []  # every "open a connection" request
        self._numbers = itertools.count(1)
        self._lose_next_ack = False

    # -- server side (the uvicorn thread) ---------------------------------------------------------

    def routes(self, app: FastAPI) -> None:
        raise NotImplementedError

    async def greet(self, connection: Connection) -> None:
        """What the vendor sends first on a new connection."""

    def frame(self, connection: Connection, data: str | bytes) -> tuple[str, Any] | None:
        """A client frame: `(delivery id, decoded ack)` for an ack, else None (recorded as received)."""
        raise NotImplementedError

    async def answer(self, connection: Connection, data: str | bytes) -> None:
        """Reply to a client frame that is not an ack (a ping), when the protocol wants one."""

    def app(self) -> FastAPI:
        app = FastAPI()
        self.routes(app)
        app.mount("/", self.vendor.app())
        return app

    async def serve_socket(self, socket: WebSocket, **info: Any) -> None:
        await socket.accept()
        with self.changed:
            connection = Connection(next(self._numbers), socket, asyncio.get_running_loop(), info=info)
            self.connections.append(connection)
            self.changed.notify_all()
        try:
            await self.greet(connection)
            while True:
                message = await socket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text, raw = message.get("text"), message.get("bytes")
                data: str | bytes = text if isinstance(text, str) else raw if isinstance(raw, bytes) else b""
                if await self._take(connection, data):
                    break
        except WebSocketDisconnect:
            pass
        finally:
            with self.changed:
                connection.open = False
                self.changed.notify_all()

    async def _take(self, connection: Connection, data: str | bytes) -> bool:
        """True when the stand-in dropped the connection."""
        ack = self.frame(connection, data)
        if ack is None:
            with self.changed:
                self.received.append((connection.number, data))
                self.changed.notify_all()
            await self.answer(connection, data)
            return False
        with self.changed:
            lose, self._lose_next_ack = self._lose_next_ack, False
            self.acks.append(Ack(ack[0], connection.number, ack[1], lost=lose))
            self.changed.notify_all()
        if lose:
            await connection.socket.close(code=1012)  # "service restart": gone before the ack counted
        return lose

    # -- test side ------------------------------------------------------------------------------

    @contextmanager
    def serve(self) -> Iterator[str]:
        with LiveServer(self.app(), ws="websockets-sansio") as live:
            self.url = live.url
            yield live.url

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
        with self.changed:
            assert self.changed.wait_for(predicate, timeout), f"stand-in: no {what} within {timeout} s"

    def open_connections(self) -> list[Connection]:
        with self.changed:
            return [c for c in self.connections if c.open]

    def wait_connected(self, total: int = 1, timeout: float = 30) -> Connection:
        """Once `total` connections were made and exactly one is open: that one."""
        self.wait(lambda: len(self.connections) >= total and sum(c.open for c in self.connections) == 1,
                  f"connection number {total}", timeout)  # fmt: skip
        [connection] = self.open_connections()
        return connection

    def acks_for(self, delivery: str) -> list[Ack]:
        with self.changed:
            return [a for a in self.acks if a.delivery == delivery]

    def wait_ack(self, delivery: str, count: int = 1, timeout: float = 30) -> Ack:
        self.wait(lambda: len([a for a in self.acks if a.delivery == delivery]) >= count, f"ack of {delivery}", timeout)
        return self.acks_for(delivery)[count - 1]

    def lose_next_ack(self) -> None:
        with self.changed:
            self._lose_next_ack = True

    def send(self, data: str | bytes) -> None:
        """Send a frame on the open connection."""
        [connection] = self.open_connections()
        socket = connection.socket
        send = socket.send_text(data) if isinstance(data, str) else socket.send_bytes(data)
        asyncio.run_coroutine_threadsafe(send, connection.loop).result(10)

    def drop(self) -> None:
        """Close the open connection mid-stream (no vendor "disconnect" message first)."""
        [connection] = self.open_connections()
        asyncio.run_coroutine_threadsafe(connection.socket.close(code=1012), connection.loop).result(10)
        self.wait(lambda: not connection.open, "close of the dropped connection")
