"""Chat and one-shot task streams (SSE: AG-UI by default, or the legacy shape), thread queries."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import Field
from sse_starlette import EventSourceResponse

from genworker.api.auth import principal_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, ErrorBody, error_responses
from genworker.api.evidence import EXAMPLE, EvidenceBody, evidence_of
from genworker.api.params import THREAD_ID_PATTERN, ThreadId
from genworker.api.runs import RunHandle, router_of, start_run
from genworker.auth import Principal
from genworker.engine.events import EngineEvent
from genworker.runtime.composition import Runtime
from genworker.streaming.agui import AguiEncoder
from genworker.streaming.legacy import legacy_event
from genworker.worker.router import RouteAccepted, RouteDone, RouteRequest

router = APIRouter(prefix="/api/v1", tags=["chat"], responses=error_responses(503))
_ROUTED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the run as server-sent events (AG-UI, or the legacy shape)",
        "content": {"text/event-stream": {}},
    },
    **error_responses(404, 422),  # an unknown worker or skill; an invalid body
}

Protocol = Literal["ag-ui", "legacy"]


class ChatRequest(RequestBody):
    worker_id: str = Field(description="a worker of the key's tenant (or tenant/worker)", examples=["assistant"])
    thread_id: str | None = Field(
        None,
        pattern=THREAD_ID_PATTERN,
        description="continue this thread; a new one when absent. 1-64 letters, digits, '_' or '-' (not `main`)",
    )
    message: str = Field(min_length=1, examples=["What is on my calendar today?"])
    skill_id: str | None = Field(None, description="force a skill instead of matching one")


class TaskRequest(RequestBody):
    worker_id: str = Field(examples=["analyst"])
    task: str = Field(min_length=1, examples=["Summarise last week's signups"])
    skill_id: str | None = None
    evidence: EvidenceBody | None = Field(
        None, description="an inferred action's evidence for the Policy Gate", examples=[EXAMPLE]
    )


async def _sse(handle: RunHandle, protocol: Protocol) -> AsyncIterator[dict[str, str]]:
    accepted = handle.accepted
    encoder = AguiEncoder(accepted.thread_id, accepted.run_id)
    async for event in handle.events():
        if isinstance(event, RouteAccepted | RouteDone):
            continue
        if protocol == "legacy":
            name, data = legacy_event(event)
            yield {"event": name, "data": json.dumps({**data, "thread_id": accepted.thread_id}, default=str)}
        else:
            for encoded in encoder.encode(event):
                yield {"data": encoded.model_dump_json(by_alias=True, exclude_none=True)}
        # The stream stays open until the run record and the session are written, so a client
        # that reads the run or sends the next message right after sees them.


def _stream(handle: RunHandle, protocol: Protocol) -> EventSourceResponse:
    headers = {"X-Thread-Id": handle.accepted.thread_id, "X-Run-Id": handle.accepted.run_id}
    return EventSourceResponse(_sse(handle, protocol), headers=headers, ping=15)


Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ProtocolQuery = Annotated[Protocol, Query(description="ag-ui (default) or legacy")]


_CHAT: dict[int | str, dict[str, Any]] = {
    **_ROUTED,
    429: {
        "model": ErrorBody,
        "description": "`service_busy`: a service worker at its `max_concurrent_sessions` takes no new conversation",
    },
}


@router.post("/chat/stream", response_class=EventSourceResponse, summary="Chat with a worker (SSE)", responses=_CHAT)
async def chat_stream(
    body: ChatRequest, principal: Auth, runtime: RuntimeDep, protocol: ProtocolQuery = "ag-ui"
) -> Any:
    """Send a message to a thread (a new one without `thread_id`) and stream the run as AG-UI events:
    RUN_STARTED, TEXT_MESSAGE_*, TOOL_CALL_*, STEP_*, then RUN_FINISHED or RUN_ERROR."""
    tenant_id, worker_id = principal_worker(principal, body.worker_id)
    req = RouteRequest(
        tenant_id, worker_id, body.message, "chat", principal.key_id, body.thread_id, skill_id=body.skill_id
    )
    return _stream(await start_run(runtime, req), protocol)


@router.post(
    "/worker/task/stream", response_class=EventSourceResponse, summary="Run a one-shot task (SSE)", responses=_ROUTED
)
async def task_stream(
    body: TaskRequest, principal: Auth, runtime: RuntimeDep, protocol: ProtocolQuery = "ag-ui"
) -> Any:
    """Run one task with no conversation history; the same event stream as chat."""
    tenant_id, worker_id = principal_worker(principal, body.worker_id)
    req = RouteRequest(
        tenant_id,
        worker_id,
        body.task,
        "task",
        principal.key_id,
        conversational=False,
        skill_id=body.skill_id,
        evidence=evidence_of(body.evidence),
    )
    return _stream(await start_run(runtime, req), protocol)


@router.get("/chat/{thread_id}/tasks", summary="Runs of a thread", responses=error_responses(404))
async def thread_tasks(thread_id: ThreadId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tasks = router_of(runtime).tasks
    found: list[dict[str, Any]] = []
    state = runtime.registry.tenant(principal.tenant_id)
    for worker in state.workers.values() if state is not None else ():
        if not principal.can_use(worker.worker_id):
            continue
        for run in await tasks.list_runs(principal.tenant_id, worker.worker_id, limit=200):
            if run.thread_id == thread_id:
                found.append(run_summary(run))
    if not found:
        raise ApiError(404, "thread_not_found", f"no runs in thread {thread_id!r}")
    return {"thread_id": thread_id, "tasks": found}


@router.get("/chat/{thread_id}/queue", summary="Who runs and who waits in a thread")
async def thread_queue(thread_id: ThreadId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    status = await router_of(runtime).queue.status(principal.tenant_id, thread_id)
    return {"thread_id": thread_id, "running": status.running, "waiting": list(status.waiting)}


def run_summary(run: Any) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "worker_id": run.worker_id,
        "thread_id": run.thread_id,
        "state": str(run.state),
        "goal_status": str(run.goal_status),
        "created_at": run.timings.queued_at.isoformat() if run.timings.queued_at else None,
        "finished_at": run.timings.finished_at.isoformat() if run.timings.finished_at else None,
    }


__all__ = ["EngineEvent", "router", "run_summary"]
