"""`genworker run`: listen on the port first, then start the runtime and serve it with uvicorn.

A taken port fails before anything runs: no scheduler, sensor or duty run touches a workspace
that another process may be serving. A SIGTERM stops the server gracefully and exits 0.
"""

from __future__ import annotations

import errno
import gc
import logging
import signal
import socket
from types import FrameType

from genworker.cli_http import CliError
from genworker.settings import Settings

__all__ = ["listen", "serve"]

STARTUP_FAILURE = 3  # uvicorn's exit status when the app's start-up fails
BACKLOG = 2048  # uvicorn's default


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
    listeners = listen(settings.http_host, settings.http_port)
    # Importing the model stack and loading the workspace make hundreds of thousands of objects and
    # almost no garbage, and full collections over that growing heap took 1-2 s of a 7-9 s start on
    # 2 cores. The collector stays off until the runtime has started (create_app's freeze_gc
    # collects once, freezes what start-up made, and turns it back on).
    gc.disable()
    import uvicorn

    from genworker.api.app import create_app

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            for sock in listeners if self.started else ():  # uvicorn says this only for sockets it binds
                host, port = sock.getsockname()[:2]
                logging.getLogger("uvicorn.error").info(
                    "Uvicorn running on http://%s:%d (Press CTRL+C to quit)",
                    f"[{host}]" if ":" in host else host,
                    port,
                )

    config = uvicorn.Config(
        create_app(settings, freeze_gc=True),
        host=settings.http_host,
        port=settings.http_port,
        log_level=settings.log_level.lower(),
        log_config=None,  # keep configure_logging's handler (JSON lines with GENWORKER_LOG_FORMAT=json)
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
    return 0 if server.started else STARTUP_FAILURE
