"""Starting a routed run in the background and reading its events: a client that goes away
does not stop the run, which still ends in a recorded state. The events end in RouteDone, or in
RunError when the run could not go on; reading them never raises."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from genworker.api.errors import ApiError
from genworker.engine.events import RunError
from genworker.observability.logging import internal_error_message, log_internal_error
from genworker.runtime.composition import Runtime
from genworker.worker.router import RouteAccepted, RouteError, RouteRequest, RouterEvent, WorkerRouter

__all__ = ["RunHandle", "start_run"]

log = logging.getLogger("genworker.api")

_END = object()


@dataclass
class RunHandle:
    accepted: RouteAccepted
    _events: asyncio.Queue[object]

    async def events(self) -> AsyncIterator[RouterEvent]:
        while (event := await self._events.get()) is not _END:
            yield event  # type: ignore[misc]


def router_of(runtime: Runtime) -> WorkerRouter:
    if runtime.router is None:
        raise ApiError(503, "not_ready", "the runtime is still starting")
    return runtime.router


async def start_run(runtime: Runtime, req: RouteRequest) -> RunHandle:
    """Route `req`; errors before the run is accepted become 4xx API errors."""
    stream = router_of(runtime).route_stream(req)
    try:
        first = await anext(stream)
    except RouteError as exc:
        raise ApiError(exc.status, exc.code, str(exc), exc.headers) from None
    assert isinstance(first, RouteAccepted)
    events: asyncio.Queue[object] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in stream:
                await events.put(event)
        except Exception as exc:  # the router could not record it (WorkerRouter._internal_error)
            message = internal_error_message(log_internal_error(log, f"[API] run {first.run_id} failed", exc))
            await events.put(RunError(first.run_id, "internal_error", message))
        finally:
            await events.put(_END)

    task = asyncio.create_task(pump(), name=f"run:{first.run_id}")
    runtime.background.add(task)
    task.add_done_callback(runtime.background.discard)
    return RunHandle(first, events)
