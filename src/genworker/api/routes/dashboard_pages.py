"""The JSON behind a worker's console pages drawn by `static/pages.js`: the autonomy charts, the
calendar timeline, the memory page (read-only) and supervision. Tenant-scoped like every route: the tenant is the
key's, and a worker the key may not use (or another tenant's) is a 404."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import WorkerId
from genworker.auth import Principal
from genworker.dashboard import BlockContext, BlockUnavailable
from genworker.dashboard.usage import MAX_DAYS
from genworker.dashboard.worker_pages import autonomy, memory, supervision, timeline
from genworker.memory.models import ScopeKind
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(
    prefix="/api/v1/workers/{worker_id}/dashboard", tags=["dashboard"], responses=error_responses(404, 503)
)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _context(principal: Principal, runtime: Runtime, worker_id: str) -> BlockContext:
    return BlockContext(runtime, principal, loaded_worker(principal, runtime, worker_id))


@router.get(
    "/autonomy",
    summary="Heartbeat runs, interruption-budget use and inbox arrivals per day, and the inbox's depth now",
)
async def autonomy_charts(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, days: Annotated[int, Query(ge=1, le=MAX_DAYS)] = 14
) -> dict[str, Any]:
    try:
        return await autonomy(_context(principal, runtime, worker_id), days)
    except BlockUnavailable as exc:
        raise ApiError(503, "dashboard_unavailable", str(exc)) from None


@router.get("/timeline", summary="Recent runs, the next scheduled fires and goals' due dates on one time axis")
async def calendar_timeline(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    try:
        return await timeline(_context(principal, runtime, worker_id))
    except BlockUnavailable as exc:
        raise ApiError(503, "dashboard_unavailable", str(exc)) from None


@router.get(
    "/memory", summary="What the worker remembers: episodes and statements by partition, newest first, searchable"
)
async def worker_memory(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    q: Annotated[str, Query(max_length=200, description="words that must all appear (case-insensitive)")] = "",
    partition: Annotated[ScopeKind | None, Query(description="one partition kind")] = None,
) -> dict[str, Any]:
    return await memory(_context(principal, runtime, worker_id), q, partition)


@router.get("/supervision", summary="The worker's supervisor policies and the supervisor's records of its newest runs")
async def worker_supervision(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return await supervision(_context(principal, runtime, worker_id))
