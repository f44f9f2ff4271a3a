"""The FastAPI application factory, its lifespan, and what the app answers while the runtime can
take no new work (the shared profile's Redis does not answer: docs/deploy.md#redis-faults)."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.datastructures import State
from starlette.types import ASGIApp, Receive, Scope, Send

from genworker import __version__
from genworker.api.auth import install_cors
from genworker.api.errors import error_response, install_error_handlers
from genworker.api.openapi import install_openapi
from genworker.api.ratelimit import Limiter, per_client_and_worker
from genworker.api.routes import (
    autonomy,
    channel_test,
    chat,
    dashboard,
    debug,
    duties,
    health,
    openai_compat,
    ops,
    runs,
    webhook,
    worker_metrics,
)
from genworker.api.routes import briefs as brief_routes
from genworker.api.routes import channel_replies as channel_reply_routes
from genworker.api.routes import channels as channel_routes
from genworker.api.routes import confirmations as confirmation_routes
from genworker.api.routes import conflicts as conflict_routes
from genworker.api.routes import dashboard_pages as dashboard_page_routes
from genworker.api.routes import engine_runs as engine_run_routes
from genworker.api.routes import experiments as experiment_routes
from genworker.api.routes import goals as goal_routes
from genworker.api.routes import im_config as im_config_routes
from genworker.api.routes import learning as learning_routes
from genworker.api.routes import memory_learning as memory_learning_routes
from genworker.api.routes import metrics as metrics_routes
from genworker.api.routes import outbox as outbox_routes
from genworker.api.routes import service as service_routes
from genworker.api.routes import spaces as space_routes
from genworker.api.routes import suggestions as suggestion_routes
from genworker.api.routes import supervision as supervision_routes
from genworker.api.routes import undo as undo_routes
from genworker.api.routes import waiting as waiting_routes
from genworker.api.routes import workspace_files as workspace_file_routes
from genworker.auth import ApiKeyStore
from genworker.dashboard import default_aggregator
from genworker.observability.request_id import RequestIdMiddleware
from genworker.runtime.composition import Runtime, build_runtime
from genworker.runtime.redis_health import REDIS_UNAVAILABLE
from genworker.settings import Settings, load_settings

__all__ = ["create_app"]

log = logging.getLogger("genworker.runtime")


def create_app(settings: Settings | None = None, *, freeze_gc: bool = False) -> FastAPI:
    """The HTTP app. `freeze_gc` (the server process, `genworker run`): once the runtime has started,
    its objects are moved out of the garbage collector's reach (`gc.freeze`), so a full collection
    later walks only what requests made, not the loaded workspace, app and libraries (without it,
    a long pause every hundred turns or so); and the collector is turned on, for
    `genworker run` turns it off while it starts."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        resolved = settings or load_settings()
        runtime = await asyncio.to_thread(build_runtime, resolved)
        for warning in resolved.warnings:
            log.warning("[Runtime] %s", warning)
        await runtime.start()
        app.state.api_keys = ApiKeyStore(resolved.workspace)
        app.state.service_limiters = _service_limiters(runtime)
        app.state.runtime = runtime  # last: requests are served from here on
        if freeze_gc:
            gc.collect()
            gc.freeze()
            gc.enable()
        log.info(runtime.summary_line())
        try:
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="genworker", version=__version__, lifespan=lifespan)
    # Everything the app keeps (read by api/deps.py and api/auth.py); only this factory sets it.
    app.state.runtime = None  # the started Runtime
    app.state.api_keys = None  # the tenants' API keys (ApiKeyStore) over the runtime's workspace
    app.state.service_limiters = None  # the anonymous service route's two rate limits
    app.state.dashboard = default_aggregator()  # the console's blocks
    install_error_handlers(app)
    for unreachable in (RedisConnectionError, RedisTimeoutError):
        app.add_exception_handler(unreachable, _redis_unreachable)  # type: ignore[arg-type]
    install_cors(app, (settings or load_settings()).cors_origins)  # middleware is fixed before start-up
    # Requests match routers in this order and no two paths overlap: the busiest (health, chat,
    # ingest) come first, so they skip walking the ~60 routes of the others.
    app.include_router(health.router)
    app.include_router(chat.router)
    app.include_router(openai_compat.router)
    app.include_router(webhook.router)
    app.include_router(channel_routes.router)
    app.include_router(debug.router)
    app.include_router(runs.router)
    app.include_router(confirmation_routes.router)
    app.include_router(goal_routes.router)
    app.include_router(suggestion_routes.router)
    app.include_router(conflict_routes.router)
    app.include_router(learning_routes.router)
    app.include_router(memory_learning_routes.router)
    app.include_router(ops.router)
    app.include_router(autonomy.router)
    app.include_router(duties.router)
    app.include_router(worker_metrics.router)
    app.include_router(im_config_routes.router)
    app.include_router(channel_test.router)
    app.include_router(channel_reply_routes.router)
    app.include_router(outbox_routes.router)
    app.include_router(dashboard.router)
    app.include_router(dashboard_page_routes.router)
    app.include_router(metrics_routes.router)
    app.include_router(brief_routes.router)
    app.include_router(waiting_routes.router)
    app.include_router(space_routes.router)
    app.include_router(undo_routes.router)
    app.include_router(engine_run_routes.router)
    app.include_router(service_routes.router)
    app.include_router(supervision_routes.router)
    app.include_router(experiment_routes.router)
    app.include_router(workspace_file_routes.router)
    app.add_middleware(RefuseNewWork, state=app.state)
    app.add_middleware(RequestIdMiddleware)  # outermost: error responses carry X-Request-ID too
    install_openapi(app)
    return app


_READS = frozenset({"GET", "HEAD", "OPTIONS"})


class RefuseNewWork:
    """A request that could start work (any method but GET, HEAD and OPTIONS) gets 503 with the
    runtime's `refusal` while it has one (Redis does not answer), before anything is written; reads
    go on (one that needs Redis gets the same 503 from `_redis_unreachable`)."""

    def __init__(self, app: ASGIApp, state: State) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime: Runtime | None = self.state.runtime
        refusal = runtime.refusal() if runtime is not None and scope["type"] == "http" else None
        if refusal is None or scope["method"] in _READS:
            await self.app(scope, receive, send)
            return
        await error_response(503, refusal.code, refusal.message, {"Retry-After": "1"})(scope, receive, send)


async def _redis_unreachable(request: Request, exc: RedisConnectionError | RedisTimeoutError) -> JSONResponse:
    """A request that needed Redis while it did not answer: 503 naming it, nothing half written (a
    session is written in one compare-and-set, which did not happen)."""
    message = f"Redis cannot be reached ({exc}); retry shortly"
    return error_response(503, REDIS_UNAVAILABLE, message, {"Retry-After": "1"})


def _service_limiters(runtime: Runtime) -> tuple[Limiter, Limiter]:
    number = runtime.settings.number
    per_client = int(number("GENWORKER_SERVICE_ANON_PER_MINUTE", 10, 1, 10_000))
    per_worker = int(number("GENWORKER_SERVICE_ANON_WORKER_PER_MINUTE", 120, 1, 1_000_000))
    return per_client_and_worker(runtime.services.aredis, per_client, per_worker)
