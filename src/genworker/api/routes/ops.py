"""Operator views scoped to the caller's tenant: an overview and a reload."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from genworker.api.auth import principal_worker, require_principal, worker_not_found
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import error_responses
from genworker.auth import Principal
from genworker.runtime.composition import Runtime

router = APIRouter(prefix="/api/v1/worker/ops", tags=["ops"])

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@router.get("/overview", summary="The tenant's workers, their status and recent runs")
async def overview(principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    described = runtime.registry.describe()["tenants"].get(principal.tenant_id, {})
    workers = {w: v for w, v in described.get("workers", {}).items() if principal.can_use(w)}
    return {
        "tenant_id": principal.tenant_id,
        "workspace_version": runtime.registry.version,
        "default_worker": described.get("default_worker"),
        "workers": workers,
    }


class ReloadRequest(RequestBody):
    worker_id: str | None = None  # omit: reload the whole tenant


@router.post(
    "/reload", summary="Reload the tenant, or one worker, from the workspace files", responses=error_responses(404)
)
async def reload(principal: Auth, runtime: RuntimeDep, body: ReloadRequest | None = None) -> dict[str, Any]:
    """No body, or no `worker_id`: the whole tenant. Schedules, the heartbeat and MCP servers follow.
    A rejected reload keeps the last good version serving and lists the errors (file, field, line).
    A worker that is neither loaded (or failed to load) nor a folder of the tenant is 404; a loaded
    worker whose folder is gone is `removed`."""
    if body is None or body.worker_id is None:
        outcome = await runtime.reload(principal.tenant_id)
    else:
        tenant_id, worker_id = principal_worker(principal, body.worker_id)
        if not await _known(runtime, tenant_id, worker_id):
            raise worker_not_found(body.worker_id)
        outcome = await runtime.reload(tenant_id, worker_id)
    return {
        "target": outcome.target,
        "version": outcome.version,
        "ok": outcome.ok,
        "kept_last_good": outcome.kept_last_good,
        "removed": outcome.removed,
        "errors": [e.as_dict() for e in outcome.errors],
    }


async def _known(runtime: Runtime, tenant_id: str, worker_id: str) -> bool:
    state = runtime.registry.tenant(tenant_id)
    if state is not None and (worker_id in state.workers or worker_id in state.failures):
        return True
    folder = runtime.registry.root / "tenants" / tenant_id / "workers" / worker_id  # ids checked: no escape
    return await asyncio.to_thread(folder.is_dir)
