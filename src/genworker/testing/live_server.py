"""LiveServer: the real app served by uvicorn on a free loopback port, in a background thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from genworker.testing.model_server import ScriptedModelServer, loopback_listener, scripted_env

__all__ = ["LiveServer", "serve"]


class LiveServer:
    def __init__(self, app: FastAPI, *, ws: str = "auto") -> None:
        """`ws`: uvicorn's WebSocket implementation; a server with WebSocket routes wants
        "websockets-sansio" (its default one is websockets' deprecated legacy API)."""
        self._socket = loopback_listener()
        self.port = int(self._socket.getsockname()[1])
        # asyncio's loop: on uvloop (what `genworker run` gets) a server that has served chat turns cannot
        # close its loop in this thread (OSError EBUSY in loop.close(): connections still open, such as
        # LiteLLM's pooled ones). A process exits before closing its loop; the subprocess tests run uvloop.
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", loop="asyncio", ws=ws
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="live-server", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:  # uvicorn sets this once the socket listens and lifespan ran
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            self._thread.join(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._socket.close()


@contextmanager
def serve(tmp_path: Path, workspace: Path, model: ScriptedModelServer, **env: str) -> Iterator[LiveServer]:
    """The real app on `workspace` over HTTP, every tier answered by `model` (`scripted_env`);
    `env` adds or overrides settings. Its configs folder is `tmp_path/configs`."""
    from genworker.api.app import create_app
    from genworker.settings import load_settings

    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    with LiveServer(create_app(load_settings(configs, scripted_env(model, **env), workspace=workspace))) as server:
        yield server
