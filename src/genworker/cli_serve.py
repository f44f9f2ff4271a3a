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


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port, or a CliError naming them."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # from now on connections wait in the backlog until start-up has finished
    except OSError as exc:
        sock.close()
        taken = exc.errno == errno.EADDRINUSE
        hint = " (another process is serving it: stop it or choose another --port / HTTP_PORT)" if taken else ""
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sock


def serve(settings: Settings) -> int:
    listener = listen(settings.http_host, settings.http_port)
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
            if self.started:  # uvicorn says this itself only for the sockets it binds
                host, port = listener.getsockname()[:2]
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
    with listener:
        server.run(sockets=[listener])
    return 0 if server.started else STARTUP_FAILURE
