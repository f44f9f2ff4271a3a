"""What `genworker run` serves while the runtime starts, and the start itself.

The server answers from the moment it listens (about half a second after launch): `/health` 200,
`/readiness` 503 saying what is still loading. Meanwhile the application (FastAPI, the runtime's
modules), the model layer (LiteLLM) and the runtime (workspace, stores, schedulers) load in the
background; from then on every request goes to the application. Any other request that arrives
before that waits for it, at most GENWORKER_STARTUP_WAIT_S, then gets 503 with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from genworker.observability.request_id import RequestIdMiddleware
from genworker.observability.status import Reason
from genworker.settings import Settings

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send
    from uvicorn.lifespan.on import LifespanOn

__all__ = ["APP_LOADING", "MODEL_LOADING", "RUNTIME_STARTING", "RuntimeStart", "StartingApp"]

log = logging.getLogger("genworker.runtime")

APP_LOADING = Reason("app_loading", "loading the application", "runtime")
MODEL_LOADING = Reason("model_loading", "loading the model layer (LiteLLM)", "llm")
RUNTIME_STARTING = Reason("runtime_starting", "loading the workspace and starting the runtime", "workspace")
_STATUS_PATHS = frozenset({"/health", "/readiness"})
_T = TypeVar("_T")


class StartingApp:
    """The ASGI app the server runs: the application once it has started (`app`), until then the
    answers above. `stop()` releases requests still waiting (503) when the server shuts down."""

    def __init__(self, wait_s: float) -> None:
        self.app: ASGIApp | None = None
        self.phase = APP_LOADING
        self.failure = ""  # why the runtime could not start
        self.wait_s = wait_s
        self._settled = asyncio.Event()  # started, failed or stopping
        self._answer = RequestIdMiddleware(self._respond)  # the same X-Request-ID in and out as later

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app = self.app
        if app is None and not self._answers_now(scope):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), self.wait_s)
            app = self.app
        if app is not None:
            await app(scope, receive, send)
        else:  # HTTP only: the server takes no WebSocket (cli/serve.py)
            await self._answer(scope, receive, send)

    def started(self, app: ASGIApp) -> None:
        self.app = app
        self._settled.set()

    def failed(self, why: str) -> None:
        self.failure = why
        self._settled.set()

    def stop(self) -> None:
        self._settled.set()

    def _answers_now(self, scope: Scope) -> bool:
        return scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in _STATUS_PATHS

    async def _respond(self, scope: Scope, receive: Receive, send: Send) -> None:
        status, body, retry = self._status(scope)
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
        if retry:
            headers.append((b"retry-after", str(retry).encode()))
        payload = json.dumps(body).encode()
        headers.append((b"content-length", str(len(payload)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    def _status(self, scope: Scope) -> tuple[int, dict[str, Any], int]:
        """(status, body, Retry-After seconds or 0) while the application is not serving."""
        reason = Reason("startup_failed", self.failure, "runtime") if self.failure else self.phase
        if self._answers_now(scope):
            if scope["path"] == "/health" and not self.failure:
                return 200, {"status": "starting", "reasons": [reason.as_dict()]}, 0
            return 503, {"status": "not_ready", "reasons": [reason.as_dict()], "warnings": []}, 0 if self.failure else 1
        if self.failure:
            message = f"the runtime failed to start ({self.failure}); the server is stopping"
            return 503, {"error": {"code": "unavailable", "message": message}}, 0
        message = f"the server is starting ({self.phase.message}); retry shortly"
        return 503, {"error": {"code": "starting", "message": message}}, 2


class RuntimeStart:
    """Loads the application in a background thread, then runs its start-up (the runtime's lifespan)
    on the server's loop, and its shutdown when the server stops."""

    def __init__(self, settings: Settings, starting: StartingApp, on_started: Callable[[], None]) -> None:
        self.settings = settings
        self.starting = starting
        self.on_started = on_started
        self.lifespan: LifespanOn | None = None
        self._task: asyncio.Task[None] | None = None

    def begin(self, state: dict[str, Any]) -> None:
        """Start loading; `state` is the server's lifespan state, which every request's scope copies."""
        self._task = asyncio.get_running_loop().create_task(self._run(state), name="runtime-start")

    async def _run(self, state: dict[str, Any]) -> None:
        try:
            app = await _in_daemon_thread(self._load)
            import uvicorn
            from uvicorn.lifespan.on import LifespanOn

            self.starting.phase = RUNTIME_STARTING
            config = uvicorn.Config(app, lifespan="on", log_config=None, proxy_headers=False, ws="none")
            self.lifespan = LifespanOn(config)
            self.lifespan.state = state  # what the application's lifespan yields reaches its requests
            await self.lifespan.startup()  # logs "Application startup complete." or why it failed
            if self.lifespan.should_exit:
                self.starting.failed("the application's start-up failed: see the log")
                return
        except Exception as exc:
            log.exception("[Runtime] the application failed to load")
            self.starting.failed(f"{type(exc).__name__}: {exc}")
            return
        self.starting.started(app)
        self.on_started()

    def _load(self) -> ASGIApp:
        """In the background thread: import the application, and LiteLLM when a model is configured
        (unless GENWORKER_LLM_LOAD=first_use)."""
        from genworker.api.app import create_app
        from genworker.llm.config_source import load_model_config

        model = load_model_config(self.settings)
        if model.state.configured and not model.load_on_first_use:
            from genworker.llm.loader import load_litellm

            self.starting.phase = MODEL_LOADING
            load_litellm()
        return create_app(self.settings, freeze_gc=True)

    async def stop(self) -> None:
        """A start still importing is dropped (nothing runs yet); one running its start-up finishes it,
        then the application shuts down."""
        task = self._task
        if task is None:
            return
        if self.lifespan is None:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self.lifespan is not None and self.starting.app is not None:
            await self.lifespan.shutdown()


def _in_daemon_thread(work: Callable[[], _T]) -> asyncio.Future[_T]:
    """`work()` in a daemon thread: a server stopped while it imports exits without waiting for it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # handed to the awaiting task
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=run, name="genworker-start", daemon=True).start()
    return future
