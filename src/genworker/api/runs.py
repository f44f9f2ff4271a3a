"""Starting a routed run in the background and reading its events: a client that goes away
does not stop the run, which still ends in a recorded state. The events end in RouteDone, or in
RunError when the run could not go on; reading them never raises.

Between the engine and the SSE encoder there is one task and one queue: the engine runs in the run's
task and its events go from the router straight into the handle's queue, which the response reads.
The queue is unbounded: the engine never waits for a slow or absent client."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from genworker.api.errors import ApiError
from genworker.engine.events import RunError
from genworker.observability.logging import internal_error_message, log_internal_error
from genworker.runtime.composition import Runtime
from genworker.worker.router import RouteAccepted, RouteError, RouteRequest, RouterEvent, WorkerRouter
from genworker.worker.routing import RouteEvents
from genworker.worker.task import RunRef

__all__ = ["ROUTE_STATUSES", "RunHandle", "route_error", "start_run"]

log = logging.getLogger("genworker.api")

SHUT_DOWN = "the server shut down before the run ended; it was interrupted"

# The status the API answers a request the router cannot route with, by RouteError code.
ROUTE_STATUSES: Mapping[str, int] = {
    "worker_not_found": 404,
    "skill_not_found": 404,  # like an unknown worker
    "cross_tenant": 403,
    "invalid_thread_id": 422,
    "service_busy": 429,
}


@dataclass
class RunHandle:
    accepted: RouteAccepted
    _events: RouteEvents

    async def events(self) -> AsyncIterator[RouterEvent]:
        async for event in self._events:
            yield event


def route_error(exc: RouteError) -> ApiError:
    """The API's answer to a request the router refused: its code and message as they are; a busy
    service's Retry-After."""
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s is not None else None
    return ApiError(ROUTE_STATUSES.get(exc.code, 404), exc.code, str(exc), headers)


async def _interrupt(router: WorkerRouter, ref: RunRef) -> None:
    try:
        await router.tasks.interrupt(ref, SHUT_DOWN)
    except Exception:  # it ended meanwhile, or the disk failed: the next start's recovery sees it
        log.warning("[API] run %s could not be recorded interrupted at shutdown", ref.run_id, exc_info=True)


def router_of(runtime: Runtime) -> WorkerRouter:
    return runtime.services.router


async def start_run(runtime: Runtime, req: RouteRequest) -> RunHandle:
    """Route `req`; errors before the run is accepted become 4xx API errors. The run goes on in a
    task of the runtime's; the engine's events reach the handle's queue from that task directly."""
    router = router_of(runtime)
    try:
        route = await router.accept(req)
    except RouteError as exc:
        raise route_error(exc) from None
    run_id = route.accepted.run_id
    events = RouteEvents()

    async def run() -> None:
        try:
            await router.run(route, events.put)
        except Exception as exc:  # the router could not record it (Settler.internal_error)
            message = internal_error_message(log_internal_error(log, f"[API] run {run_id} failed", exc))
            await events.put(RunError(run_id, "internal_error", message))
        except asyncio.CancelledError:  # the server is shutting down and its grace has run out (Runtime.drain)
            await events.put(RunError(run_id, "shutting_down", SHUT_DOWN))
            await _interrupt(router, RunRef(req.tenant_id, req.worker_id, run_id))
            raise
        finally:
            events.close()

    task = asyncio.create_task(run(), name=f"run:{run_id}")
    runtime.background.add(task)
    task.add_done_callback(runtime.background.discard)
    return RunHandle(route.accepted, events)
