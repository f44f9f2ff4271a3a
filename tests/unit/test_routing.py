"""worker/routing.py: `run_to_end` reads a routed run's events to its RouteDone; `RouteEvents` carries
them from the task that runs a route to whoever reads them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import pytest

from genworker.engine.base import RunResult
from genworker.engine.events import RunError, RunStarted, TextDelta
from genworker.worker.routing import RouteAccepted, RouteDone, RouteEvents, RouterEvent, run_to_end
from genworker.worker.task import RunRecord, RunState, RunTimings

pytestmark = pytest.mark.anyio

ACCEPTED = RouteAccepted("t1", "run_1", "task_1")
DONE = RouteDone(
    RunResult("completed", output="ok"),
    RunRecord("run_1", "task_1", "acme", "alice", RunState.COMPLETED, RunTimings(queued_at=datetime.now(UTC))),
)


async def events(*items: RouterEvent, fail: Exception | None = None) -> AsyncIterator[RouterEvent]:
    for item in items:
        yield item
    if fail is not None:
        raise fail


async def test_run_to_end_returns_the_route_done_and_shows_each_event_first() -> None:
    seen: list[RouterEvent] = []
    stream = (ACCEPTED, RunStarted("run_1", "react", "s"), TextDelta("ok"), DONE)
    assert await run_to_end(events(*stream), on_event=seen.append) is DONE
    assert seen == list(stream)


async def test_run_to_end_without_a_route_done_is_none() -> None:
    assert await run_to_end(events(ACCEPTED, RunError("run_1", "internal_error", "error id err_1"))) is None


async def test_run_to_end_passes_the_router_error_on() -> None:
    with pytest.raises(OSError, match="disk full"):
        await run_to_end(events(ACCEPTED, fail=OSError("disk full")))


async def test_route_events_are_read_in_order_until_closed() -> None:
    queue = RouteEvents()
    sent: Sequence[RouterEvent] = (ACCEPTED, TextDelta("a"), DONE)
    for event in sent:
        await queue.put(event)
    queue.close()
    assert [e async for e in queue] == list(sent)
