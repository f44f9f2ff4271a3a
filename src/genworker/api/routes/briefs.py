"""A worker's briefs and interruption budget: list and read stored briefs, generate one now,
see the items waiting for the next brief. Tenant-scoped like every route."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from genworker.api.auth import principal_worker, require_principal, worker_not_found
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import BriefId, WorkerId
from genworker.auth import Principal
from genworker.autonomy.briefs import BriefError, BriefNotFound, BriefService, local_day
from genworker.ids import InvalidIdError
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["briefs"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _scope(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str, BriefService]:
    tenant_id, worker = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, worker) is None:
        raise worker_not_found(worker_id)
    return tenant_id, worker, runtime.services.briefs


@router.get("/briefs", summary="Stored briefs, newest first")
async def list_briefs(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=100)] = 20
) -> dict[str, Any]:
    tenant_id, worker, briefs = _scope(principal, runtime, worker_id)
    try:
        found = await asyncio.to_thread(briefs.store.list, tenant_id, worker, limit)
    except BriefError as exc:
        raise ApiError(500, "brief_unreadable", str(exc)) from None
    return {"worker_id": worker, "briefs": [b.model_dump(mode="json") for b in found]}


@router.get("/briefs/pending", summary="Items recorded for the next brief, and today's interruption budget")
async def pending_items(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, briefs = _scope(principal, runtime, worker_id)
    policy = briefs.policy(tenant_id, worker)
    day = local_day(policy, briefs.now())
    items = await asyncio.to_thread(briefs.store.pending, tenant_id, worker)
    budget = await asyncio.to_thread(briefs.store.budget, tenant_id, worker, day)
    return {
        "worker_id": worker,
        "items": [i.model_dump(mode="json") for i in items],
        "interruption_budget": {"day": day, "used": budget.used, "limit": policy.interruption_budget_per_day},
        "brief_window_hours": policy.brief_window_hours,
    }


@router.post("/briefs/generate", summary="Generate (and deliver) a brief now")
async def generate_brief(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, deliver: bool = True
) -> dict[str, Any]:
    tenant_id, worker, briefs = _scope(principal, runtime, worker_id)
    brief = await briefs.generate(tenant_id, worker, deliver=deliver)
    return {"brief": brief.model_dump(mode="json")}


@router.get("/briefs/{brief_id}", summary="One stored brief")
async def get_brief(worker_id: WorkerId, brief_id: BriefId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, briefs = _scope(principal, runtime, worker_id)
    try:
        brief = await asyncio.to_thread(briefs.store.get, tenant_id, worker, brief_id)
    except (BriefNotFound, InvalidIdError):
        raise ApiError(404, "brief_not_found", f"no brief {brief_id!r} for worker {worker_id!r}") from None
    except BriefError as exc:
        raise ApiError(500, "brief_unreadable", str(exc)) from None
    return {"brief": brief.model_dump(mode="json")}
