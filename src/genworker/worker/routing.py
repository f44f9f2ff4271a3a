"""What goes into the router and what comes out: `RouteRequest`, the events of a routed run
(`RouteAccepted`, the engine's events, `RouteDone` last), `RouteError` for a request that cannot be
routed, and `run_to_end`, the one way to follow a run to its `RouteDone`.

This module imports nothing else of the router, so the parts the router composes (the service desk,
engine state, delegation) can name a request or an event without importing the router itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from genworker.engine.base import Continuation, RunResult
from genworker.engine.events import EngineEvent
from genworker.worker.governance.evidence import NO_EVIDENCE, Evidence
from genworker.worker.governance.models import SourceType
from genworker.worker.task import RunRecord, RunRef

__all__ = [
    "RouteAccepted",
    "RouteDone",
    "RouteEmit",
    "RouteError",
    "RouteEvents",
    "RouteRequest",
    "RouterEvent",
    "RunOverrides",
    "run_to_end",
]

Message = Mapping[str, Any]


class RouteError(Exception):
    """The request cannot be routed; raised before the run is accepted, with nothing recorded.
    `code` says why: worker_not_found, skill_not_found, cross_tenant (a parent run of another
    tenant), invalid_thread_id, service_busy (with `retry_after_s`, when a place should be free).
    The API answers each code with its own status (api/runs.py)."""

    def __init__(self, code: str, message: str, *, retry_after_s: int | None = None) -> None:
        self.code = code
        self.retry_after_s = retry_after_s
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class RunOverrides:
    """One experiment variant's changes to a run (docs/experiments.md): the model tier of its turns,
    instructions added to its system prompt, and a tool allow-list narrower than the worker's."""

    tier: str | None = None
    instructions: str = ""
    tools: tuple[str, ...] | None = None  # names or fnmatch patterns; None: the worker's tools


@dataclass(frozen=True, slots=True)
class RouteRequest:
    tenant_id: str  # always from the credential, never from the body
    worker_id: str
    text: str
    source_type: SourceType = "chat"
    source_id: str | None = None
    thread_id: str | None = None
    conversational: bool = True  # keep history in the thread session
    skill_id: str | None = None
    preferred_skill_ids: tuple[str, ...] = ()  # ranked ahead of others when the text matches no better
    duty_id: str | None = None
    trigger_id: str | None = None
    goal_id: str | None = None
    approval_ref: str | None = None
    history: tuple[Message, ...] = ()  # stateless callers (OpenAI-compatible) send their own
    idempotency_key: str | None = None  # a second request with the same key gets the first run back
    scheduled_for: datetime | None = None
    evidence: Evidence = NO_EVIDENCE  # an inferred action's confidence, sources, actions (the Policy Gate's)
    resume: tuple[Message, ...] = ()  # an approved tool call's checkpoint: the engine continues it
    continuation: Continuation | None = None  # a plan or graph of an earlier run: the engine continues it
    parent: RunRef | None = None  # delegated: the run that asked for it (its tenant must be this one)
    delegation_depth: int = 0  # the parent's depth + 1
    overrides: RunOverrides | None = None  # an experiment variant's tier, instructions and tools


@dataclass(frozen=True, slots=True)
class RouteAccepted:
    thread_id: str
    run_id: str
    task_id: str


@dataclass(frozen=True, slots=True)
class RouteDone:
    result: RunResult
    record: RunRecord


RouterEvent = RouteAccepted | EngineEvent | RouteDone
RouteEmit = Callable[[RouterEvent], Awaitable[None]]


class RouteEvents:
    """A run's events between the task that runs it and whoever reads them (or nobody: the run goes
    on). Unbounded, as the engine never waits for a reader; `close` ends the reading."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[RouterEvent | None] = asyncio.Queue()

    async def put(self, event: RouterEvent) -> None:
        self._queue.put_nowait(event)

    def close(self) -> None:
        self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[RouterEvent]:
        while (event := await self._queue.get()) is not None:
            yield event


async def run_to_end(
    events: AsyncIterable[RouterEvent], *, on_event: Callable[[RouterEvent], object] | None = None
) -> RouteDone | None:
    """Read a routed run's events to their end: its RouteDone, or None when the events ended without
    one (the API's events end in RunError when the run could not be recorded). `on_event` sees each
    event first. An error of the router goes to the caller."""
    done: RouteDone | None = None
    async for event in events:
        if on_event is not None:
            on_event(event)
        if isinstance(event, RouteDone):
            done = event
    return done
