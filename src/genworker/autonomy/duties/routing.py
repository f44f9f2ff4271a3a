"""How duties (and the runs they resume or escalate) reach the router: one request, routed to its end."""

from __future__ import annotations

from collections.abc import Callable

from genworker.worker.router import RouteAccepted, RouteRequest, RouterEvent, WorkerRouter, run_to_end
from genworker.worker.task import RunRecord

__all__ = ["route_through"]


async def route_through(
    router: WorkerRouter, req: RouteRequest, on_accepted: Callable[[str], None] | None = None
) -> tuple[RunRecord, bool]:
    """Route `req` to its end; (the run, whether this request created it). `on_accepted` learns the
    run's id as soon as the router accepts it."""
    accepted: list[str] = []  # the run id the router gave this request

    def seen(event: RouterEvent) -> None:
        if isinstance(event, RouteAccepted):
            accepted.append(event.run_id)
            if on_accepted is not None:
                on_accepted(event.run_id)

    done = await run_to_end(router.route_stream(req), on_event=seen)
    assert done is not None
    return done.record, done.record.run_id in accepted
