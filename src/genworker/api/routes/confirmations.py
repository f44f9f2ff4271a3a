"""Gated tasks waiting for a person: list them, approve or reject one. Tenant-scoped.

An approval routes the task again with the confirmation as its `approval_ref` and answers with
the new run; a rejection cancels the waiting run. Unknown id: 404; already decided: 409.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import ConfirmationId, WorkerId
from genworker.api.routes.chat import run_summary
from genworker.api.runs import router_of, start_run
from genworker.auth import Principal
from genworker.runtime.composition import Runtime
from genworker.worker.confirmations.models import (
    Confirmation,
    ConfirmationDecided,
    ConfirmationError,
    ConfirmationNotFound,
)
from genworker.worker.confirmations.resolve import resolve
from genworker.worker.router import RouteRequest, run_to_end
from genworker.worker.task import RunRecord

__all__ = ["confirmation_view", "router"]

router = APIRouter(
    prefix="/api/v1/workers/{worker_id}/confirmations", tags=["confirmations"], responses=error_responses(404, 503)
)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _worker(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str]:
    return loaded_worker(principal, runtime, worker_id).key


def confirmation_view(confirmation: Confirmation) -> dict[str, Any]:
    return asdict(confirmation)


@router.get("", summary="Gated tasks waiting for a decision (and decided ones), newest first")
async def list_confirmations(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    status: Annotated[Literal["pending", "approved", "rejected"] | None, Query()] = None,
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    items = await asyncio.to_thread(router_of(runtime).confirmations.list, tenant_id, worker, status)
    return {"worker_id": worker, "confirmations": [confirmation_view(c) for c in items]}


@router.get("/{confirmation_id}", summary="One confirmation")
async def get_confirmation(
    worker_id: WorkerId, confirmation_id: ConfirmationId, principal: Auth, runtime: RuntimeDep
) -> Any:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    try:
        found = await asyncio.to_thread(router_of(runtime).confirmations.get, tenant_id, worker, confirmation_id)
    except (ConfirmationError, ValueError) as exc:
        raise ApiError(404, "confirmation_not_found", str(exc)) from None
    if found is None:
        raise ApiError(404, "confirmation_not_found", f"no confirmation {confirmation_id!r}")
    return confirmation_view(found)


@router.post(
    "/{confirmation_id}/{decision}",
    summary="Approve (runs the task) or reject a gated task",
    responses=error_responses(409),
)
async def decide(
    worker_id: WorkerId,
    confirmation_id: ConfirmationId,
    decision: Literal["approve", "reject"],
    principal: Auth,
    runtime: RuntimeDep,
) -> Any:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"

    async def run(req: RouteRequest) -> tuple[RunRecord | None, str]:
        # in the runtime's background: a client that goes away does not stop the approved run
        handle = await start_run(runtime, req)
        done = await run_to_end(handle.events())
        return (done.record, done.result.output) if done is not None else (None, "")

    try:
        resolved = await resolve(
            router_of(runtime),
            tenant_id,
            worker,
            confirmation_id,
            decision,
            by,
            run=run,
        )
    except ConfirmationDecided as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except (ConfirmationNotFound, ValueError) as exc:  # ValueError: a malformed id
        raise ApiError(404, "confirmation_not_found", str(exc)) from None
    except ConfirmationError as exc:
        raise ApiError(500, "confirmation_unreadable", str(exc)) from None
    body: dict[str, Any] = {"confirmation": confirmation_view(resolved.confirmation)}
    if decision == "approve":
        body["run"] = run_summary(resolved.run) if resolved.run is not None else None
        body["output"] = resolved.output
    return body
