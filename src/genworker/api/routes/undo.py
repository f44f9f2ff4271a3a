"""Deferred actions in their undo window: list them, read one, undo one. Tenant-scoped.

A run the Policy Gate let through on condition of the undo window holds its external calls
(docs/policy-gate.md#the-undo-window). Undo before the deadline and the call never executes;
unknown id (or another tenant's): 404; already executed, undone, expired: 409.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

from fastapi import APIRouter, Depends, Query

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import UndoId, WorkerId
from genworker.auth import Principal
from genworker.ids import InvalidIdError
from genworker.runtime.composition import Runtime
from genworker.tools.middlewares.undo_window import DeferredCall, DeferredState, UndoError, UndoNotFound, UndoTooLate

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/deferred-actions", tags=["undo"], responses=error_responses(404))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
STATES: tuple[str, ...] = get_args(DeferredState)


def _not_found(undo_id: str, why: str | None = None) -> ApiError:
    return ApiError(404, "deferred_action_not_found", why or f"no deferred action {undo_id!r}")


@router.get("", summary="A worker's deferred actions, newest first (pending ones can still be undone)")
async def list_deferred(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    state: Annotated[DeferredState | None, Query(description=f"one of {', '.join(STATES)}")] = None,
) -> dict[str, Any]:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    try:
        records = await runtime.tools.undo.records(tenant_id, worker, state)
    except UndoError as exc:
        raise ApiError(500, "deferred_action_unreadable", str(exc)) from None
    return {"worker_id": worker, "deferred_actions": [r.as_json() for r in records]}


@router.get("/{undo_id}", summary="One deferred action")
async def get_deferred(worker_id: WorkerId, undo_id: UndoId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    return (await _read(runtime, tenant_id, worker, undo_id)).as_json()


@router.post("/{undo_id}/undo", summary="Undo a pending action: it never executes", responses=error_responses(409))
async def undo_deferred(worker_id: WorkerId, undo_id: UndoId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    try:
        record = await runtime.tools.undo.undo(tenant_id, worker, undo_id, by=f"key:{principal.key_id}")
    except UndoTooLate as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except (UndoNotFound, InvalidIdError) as exc:
        raise _not_found(undo_id, str(exc)) from None
    except UndoError as exc:
        raise ApiError(500, "deferred_action_unreadable", str(exc)) from None
    return record.as_json()


async def _read(runtime: Runtime, tenant_id: str, worker: str, undo_id: str) -> DeferredCall:
    try:
        return await runtime.tools.undo.get(tenant_id, worker, undo_id)
    except (UndoNotFound, InvalidIdError) as exc:
        raise _not_found(undo_id, str(exc)) from None
    except UndoError as exc:
        raise ApiError(500, "deferred_action_unreadable", str(exc)) from None
