"""What a worker still owes the people who wrote to it on IM, and a person's hand in it.

    GET    /api/v1/workers/{w}/channel-replies                          undelivered answers and
                                                                        messages needing a human
    POST   /api/v1/workers/{w}/channel-replies/{entry_id}/resend        try an undelivered answer now
    DELETE /api/v1/workers/{w}/channel-replies/attention/{item_id}      a human has checked it

Tenant-scoped like every worker route (another tenant's worker answers 404). See docs/channels.md
"Nothing is lost".
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import WorkerId, id_path
from genworker.auth import Principal
from genworker.ids import InvalidIdError
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers", tags=["channels"], responses=error_responses(404, 503))
EntryId = Annotated[str, id_path("undelivered answer id")]
MessageId = Annotated[str, id_path("id of the message waiting for a human")]

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@router.get("/{worker_id}/channel-replies", summary="Undelivered IM answers and messages that need a human")
async def list_replies(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    processor = runtime.services.channels.processor
    return {
        "worker_id": worker,
        "undelivered": await processor.undelivered(tenant_id, worker),
        "attention": await processor.needs_attention(tenant_id, worker),
    }


@router.post(
    "/{worker_id}/channel-replies/{entry_id}/resend",
    summary="Send an undelivered IM answer again now",
    responses=error_responses(409),
)
async def resend(worker_id: WorkerId, entry_id: EntryId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    processor = runtime.services.channels.processor
    try:
        outcome = await processor.resend(tenant_id, worker, entry_id)
    except InvalidIdError:
        outcome = None
    except ValueError as exc:
        raise ApiError(409, "not_answered_yet", str(exc)) from None
    if outcome is None:
        raise ApiError(404, "not_found", f"no undelivered answer {entry_id!r} for worker {worker!r}")
    return {"id": entry_id, "outcome": outcome, "delivered": outcome in ("replied", "notified")}


@router.delete("/{worker_id}/channel-replies/attention/{item_id}", status_code=204, summary="Dismiss a checked message")
async def dismiss(worker_id: WorkerId, item_id: MessageId, principal: Auth, runtime: RuntimeDep) -> Response:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    processor = runtime.services.channels.processor
    try:
        found = await processor.dismiss(tenant_id, worker, item_id)
    except InvalidIdError:
        found = False
    if not found:
        raise ApiError(404, "not_found", f"no message {item_id!r} waiting for a human on worker {worker!r}")
    return Response(status_code=204)
