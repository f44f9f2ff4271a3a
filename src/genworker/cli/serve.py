"""`genworker run`: listen on the port first, answer /health at once, start the runtime in the
background (cli/startup.py) and serve it with uvicorn once it has started.

A taken port fails before anything runs: no scheduler, sensor or duty run touches a workspace
that another process may be serving. A runtime that fails to start ends the process with status 3.
In the shared profile the runtime starts once Redis answers (until then /readiness says 503
`redis_unavailable`): it never runs on the single-process file backends.

A SIGTERM drains the process and exits 0 (docs/deploy.md#graceful-shutdown): `/readiness` turns
503 `shutting_down` at once; the listening sockets and idle connections close (a load balancer
moves new requests to the other processes); the runtime hands over its worker claims and IM long
connections (`Runtime.drain`); open chat streams and runs go on for up to
GENWORKER_SHUTDOWN_GRACE_S (30 s), after which the runs still going are interrupted and their
streams end with a `shutting_down` error event; then the runtime stops and releases its lease.

Idle kept-alive connections stay open GENWORKER_KEEP_ALIVE_S (75 s): longer than a load balancer
keeps its idle connections to the process (nginx: 60 s), so the balancer closes them first and never
sends a request on a connection the process is closing at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import math
import signal
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any

from genworker.cli.http import CliError
from genworker.settings import Settings

if TYPE_CHECKING:
    from genworker.cli.startup import RuntimeStart, StartingApp
    from genworker.runtime.composition import Runtime

__all__ = ["listen", "serve"]

STARTUP_FAILURE = 3  # uvicorn's exit status when the app's start-up fails
BACKLOG = 2048  # uvicorn's default
STUCK_CONNECTIONS_S = 5  # after the grace, how long connections get to close before they are cut
REDIS_RETRY_S = 1.0  # shared profile: how often a process waiting for Redis tries again
REDIS_LOG_EVERY = 30  # tries between two log lines saying so


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets listening on every address of host:port (`localhost` may be 127.0.0.1 and ::1, as
    uvicorn would bind them), or a CliError naming host:port."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # :: next to 0.0.0.0 must not claim the IPv4 port too
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)  # from now on connections wait in the backlog until start-up has finished
    except OSError as exc:
        for sock in sockets:
            sock.close()
        taken = exc.errno == errno.EADDRINUSE
        hint = " (another process is serving it: stop it or choose another --port / HTTP_PORT)" if taken else ""
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sockets


def serve(settings: Settings) -> int:
    wait_s = settings.number("GENWORKER_STARTUP_WAIT_S", 30, 0, 3600)
    grace_s = settings.number("GENWORKER_SHUTDOWN_GRACE_S", 30, 0, 86_400)
    keep_alive_s = settings.number("GENWORKER_KEEP_ALIVE_S", 75, 1, 3600)
    listeners = listen(settings.http_host, settings.http_port)
    # Importing the application and loading the workspace make hundreds of thousands of objects and
    # almost no garbage, and full collections over that growing heap took 1-2 s of a 7-9 s start on
    # 2 cores. The collector stays off until the runtime has started (create_app's freeze_gc
    # collects once, freezes what start-up made, and turns it back on).
    gc.disable()
    import uvicorn
    from sse_starlette.sse import AppStatus

    from genworker.cli.startup import RuntimeStart, StartingApp

    # sse-starlette ends every open stream the moment uvicorn sees a signal; the runtime's drain
    # ends them instead, each when its run has ended (or with an error event once the grace is over)
    AppStatus.enable_automatic_graceful_drain = False  # what disable_automatic_graceful_drain() sets
    starting = StartingApp(wait_s)

    def running() -> None:  # the line uvicorn writes for sockets it binds itself
        for sock in listeners:
            logging.getLogger("uvicorn.error").info("Uvicorn running on %s (Press CTRL+C to quit)", _url(sock))

    process = _Process(settings, starting, RuntimeStart(settings, starting, on_started=running), grace_s)

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                where = ", ".join(_url(sock) for sock in listeners)
                logging.getLogger("genworker.runtime").info(
                    "Listening on %s: /health answers now, /readiness says 503 until the runtime has started",
                    where,
                )
                process.begin(self.lifespan.state)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            process.signalled()
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await process.shutdown(partial(super().shutdown, sockets))

        async def on_tick(self, counter: int) -> bool:
            return await super().on_tick(counter) or bool(starting.failure)

    config = uvicorn.Config(
        starting,
        host=settings.http_host,
        port=settings.http_port,
        log_level=settings.log_level.lower(),
        log_config=None,  # keep configure_logging's handler (JSON lines with GENWORKER_LOG_FORMAT=json)
        lifespan="off",  # the application's own lifespan runs once it has loaded (RuntimeStart)
        ws="none",  # genworker serves no WebSocket route: no WebSocket library to import before listening
        timeout_graceful_shutdown=math.ceil(grace_s) + STUCK_CONNECTIONS_S,  # a bound for clients that stall
        timeout_keep_alive=math.ceil(keep_alive_s),
    )
    server = Server(config)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True

    # uvicorn restores the handler it found once it has shut down, then raises the signal that stopped
    # it again: with the default handler a SIGTERM would kill the process after a clean shutdown (under
    # `make run`: `make: *** Terminated`, exit 2). This one makes a finished shutdown exit 0, and stops
    # the server right after start-up if the SIGTERM comes before uvicorn listens for signals.
    signal.signal(signal.SIGTERM, stop)
    try:
        server.run(sockets=listeners)
    finally:
        for sock in listeners:
            sock.close()
    return 0 if server.started and not starting.failure else STARTUP_FAILURE


class _Process:
    """What `genworker run` does around uvicorn's start-up and shutdown: start the runtime (in the
    shared profile once Redis answers), drain it on SIGTERM, stop it."""

    def __init__(self, settings: Settings, starting: StartingApp, runtime: RuntimeStart, grace_s: float) -> None:
        self.settings = settings
        self.starting = starting
        self.runtime = runtime
        self.grace_s = grace_s
        self.beginning: asyncio.Task[None] | None = None

    def started(self) -> Runtime | None:
        app = self.starting.app
        if app is None:  # not loaded: nothing to import (a signal handler must not wait for an import lock)
            return None
        from fastapi import FastAPI

        return app.state.runtime if isinstance(app, FastAPI) else None

    def begin(self, state: dict[str, Any]) -> None:
        """Start the runtime; `state` is the server's lifespan state (RuntimeStart.begin)."""
        self.beginning = asyncio.create_task(self._begin(state), name="runtime-begin")

    async def _begin(self, state: dict[str, Any]) -> None:
        if self.settings.profile == "shared" and self.settings.redis_url:
            await wait_for_redis(self.settings.redis_url, self.starting)
        self.runtime.begin(state)

    def signalled(self) -> None:
        """In the signal handler: /readiness turns 503 at once, before the sockets close."""
        if (runtime := self.started()) is not None:
            runtime.draining = True

    async def shutdown(self, server_shutdown: Callable[[], Awaitable[None]]) -> None:
        self.starting.stop()  # requests still waiting for the runtime are answered 503
        runtime = self.started()
        drained = asyncio.create_task(runtime.drain(self.grace_s)) if runtime is not None else None
        await server_shutdown()  # closes the listeners, then waits for open connections (streams end with their runs)
        if drained is not None:
            await drained
        if self.beginning is not None:  # still waiting for Redis: the runtime never started
            self.beginning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.beginning
        await self.runtime.stop()


async def wait_for_redis(url: str, starting: StartingApp) -> None:
    """Until Redis answers PING, /readiness says why not (`redis_unavailable`), tried every second."""
    from genworker.observability.status import Reason
    from genworker.runtime.redis_health import REDIS_UNAVAILABLE, unreachable

    log = logging.getLogger("genworker.runtime")
    tries = 0
    while (why := await asyncio.to_thread(unreachable, url)) is not None:
        starting.phase = Reason(REDIS_UNAVAILABLE, f"{why}; the shared profile waits for it", "redis")
        if tries % REDIS_LOG_EVERY == 0:
            log.error("[Runtime] %s: the shared profile starts once it answers", why)
        tries += 1
        await asyncio.sleep(REDIS_RETRY_S)
    if tries:
        log.warning("[Runtime] Redis answers: starting")


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"
