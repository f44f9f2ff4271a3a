"""Service mode over HTTP: anonymous chat with a service worker that allows it, and handing back a
conversation a person took over.

`POST /api/v1/service/{tenant_id}/{worker_id}/chat/stream` takes no API key. It answers 403
`anonymous_not_allowed` unless the worker is `mode: service` with `service.anonymous_allowed: true`
(an unknown worker gets the same answer, so the route tells nobody which workers exist), and 429
`rate_limited` (with Retry-After) past `GENWORKER_SERVICE_ANON_PER_MINUTE` messages a minute from
one client address, or `GENWORKER_SERVICE_ANON_WORKER_PER_MINUTE` to one worker from everyone.
Its conversations are threads `anon_` + 32 hex digits the server makes: one from a keyed client
can never be continued here. A service at its `max_concurrent_sessions` answers a new conversation
with 429 `service_busy`, on this route and on /api/v1/chat/stream alike (docs/service.md).
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import Field
from sse_starlette import EventSourceResponse

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime, service_limiters_of
from genworker.api.errors import ApiError, ErrorBody, error_responses
from genworker.api.params import TenantId, ThreadId, WorkerId
from genworker.api.routes.chat import ProtocolQuery, _stream
from genworker.api.runs import router_of, start_run
from genworker.auth import Principal
from genworker.runtime.composition import Runtime
from genworker.worker.handoff import HandOffs, NotHandedOver
from genworker.worker.router import RouteRequest
from genworker.worker.service import is_service

__all__ = ["ANONYMOUS_THREAD_PATTERN", "router"]

router = APIRouter(tags=["service"])

ANONYMOUS_THREAD_PATTERN = r"^anon_[0-9a-f]{32}$"
_LIMITED = {"model": ErrorBody, "description": "too many messages, or (`service_busy`) the service is full"}


class ServiceChatRequest(RequestBody):
    thread_id: str | None = Field(
        None,
        pattern=ANONYMOUS_THREAD_PATTERN,
        description="continue this conversation (the threadId of its first answer); a new one when absent",
    )
    message: str = Field(min_length=1, max_length=8_000, examples=["How do I reset my password?"])


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
Auth = Annotated[Principal, Depends(require_principal)]


@router.post(
    "/api/v1/service/{tenant_id}/{worker_id}/chat/stream",
    response_class=EventSourceResponse,
    summary="Chat with a service worker, without an API key (SSE)",
    responses={
        200: {"description": "the run as server-sent events", "content": {"text/event-stream": {}}},
        **error_responses(403, 422),
        404: {"model": ErrorBody, "description": "the worker was removed (by a reload) while the message was routed"},
        429: _LIMITED,
    },
)
async def anonymous_chat(
    tenant_id: TenantId,
    worker_id: WorkerId,
    body: ServiceChatRequest,
    request: Request,
    runtime: RuntimeDep,
    protocol: ProtocolQuery = "ag-ui",
) -> Any:
    """A message from someone without a key, to a service worker that takes anonymous messages; the
    same event stream as /api/v1/chat/stream. Start without `thread_id`; continue with the threadId
    the first answer's RUN_STARTED carries."""
    worker = runtime.registry.worker(tenant_id, worker_id)
    if worker is None or not is_service(worker) or not worker.persona.service.anonymous_allowed:
        raise ApiError(
            403,
            "anonymous_not_allowed",
            f"{tenant_id}/{worker_id} takes no anonymous messages (it needs mode: service and "
            "service.anonymous_allowed: true in PERSONA.md); with an API key use /api/v1/chat/stream",
        )
    per_client, per_worker = service_limiters_of(request)
    client = request.client.host if request.client is not None else "unknown"
    wait = await per_client.check((tenant_id, worker_id, client)) or await per_worker.check((tenant_id, worker_id))
    if wait is not None:
        raise ApiError(
            429,
            "rate_limited",
            f"too many messages to {worker.persona.identity.display_name}: please wait {wait} seconds",
            {"Retry-After": str(wait)},
        )
    thread_id = body.thread_id or f"anon_{secrets.token_hex(16)}"
    req = RouteRequest(tenant_id, worker_id, body.message, "chat", "anonymous", thread_id)
    return _stream(await start_run(runtime, req), protocol)


@router.post(
    "/api/v1/workers/{worker_id}/service/threads/{thread_id}/release",
    summary="Hand a conversation a person took over back to the worker",
    responses=error_responses(404, 409, 503),
)
async def release_thread(worker_id: WorkerId, thread_id: ThreadId, principal: Auth, runtime: RuntimeDep) -> Any:
    """The worker answers in the thread again (and stops passing its messages on)."""
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    desk = router_of(runtime).service
    if desk is None:
        raise ApiError(503, "unavailable", "service mode is not available on this server")
    try:
        handoff = await HandOffs(desk).release(tenant_id, worker, thread_id)
    except NotHandedOver as exc:
        raise ApiError(409, "not_handed_over", str(exc)) from None
    return {"thread_id": thread_id, "released": handoff.as_json()}
