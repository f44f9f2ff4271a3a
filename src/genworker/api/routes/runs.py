"""Runs and their deliverables; gated tasks waiting for a person (confirmations)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import TypeAdapter

from genworker.api.auth import principal_worker, require_principal, worker_not_found
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError
from genworker.api.routes.chat import run_summary
from genworker.api.runs import router_of, start_run
from genworker.auth import Principal
from genworker.runtime.composition import Runtime
from genworker.worker.confirmations import ConfirmationError
from genworker.worker.lifecycle import RunNotFound, TaskLifecycleError
from genworker.worker.router import RouteDone, RouteRequest
from genworker.worker.task import RunRecord, RunRef

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["runs"])
_RUN: TypeAdapter[RunRecord] = TypeAdapter(RunRecord)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _worker(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str]:
    tenant_id, worker = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, worker) is None:
        raise worker_not_found(worker_id)
    return tenant_id, worker


@router.get("/runs", summary="A worker's runs, newest first")
async def list_runs(
    worker_id: str, principal: Auth, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    runs = await router_of(runtime).tasks.list_runs(tenant_id, worker, limit=limit)
    return {"worker_id": worker, "runs": [run_summary(r) for r in runs]}


@router.get("/runs/{run_id}", summary="One run: state, provenance, tool calls, model usage, deliverables")
async def get_run(worker_id: str, run_id: str, principal: Auth, runtime: RuntimeDep) -> Any:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    try:
        run = await router_of(runtime).tasks.get_run(RunRef(tenant_id, worker, run_id))
    except (RunNotFound, ValueError):
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {worker_id!r}") from None
    except TaskLifecycleError as exc:
        raise ApiError(500, "run_unreadable", str(exc)) from None
    return _RUN.dump_python(run, mode="json")


@router.get("/confirmations", summary="Gated tasks waiting for a decision")
async def list_confirmations(worker_id: str, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    items = await asyncio.to_thread(router_of(runtime).confirmations.list, tenant_id, worker)
    return {"worker_id": worker, "confirmations": [_plain(c) for c in items]}


@router.post("/confirmations/{confirmation_id}/{decision}", summary="Approve or reject a gated task")
async def decide(worker_id: str, confirmation_id: str, decision: str, principal: Auth, runtime: RuntimeDep) -> Any:
    if decision not in ("approve", "reject"):
        raise ApiError(404, "not_found", "use .../approve or .../reject")
    tenant_id, worker = _worker(principal, runtime, worker_id)
    route = router_of(runtime)
    status: Literal["approved", "rejected"] = "approved" if decision == "approve" else "rejected"
    try:
        decided = await asyncio.to_thread(
            route.confirmations.decide, tenant_id, worker, confirmation_id, status, f"key:{principal.key_id}"
        )
    except (ConfirmationError, ValueError) as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    waiting = RunRef(tenant_id, worker, decided.run_id)
    if status == "rejected":
        await route.tasks.cancel(waiting, f"rejected by key:{principal.key_id}")
        return {"confirmation": _plain(decided)}
    await route.tasks.supersede(waiting, f"approval {confirmation_id}")
    req = RouteRequest(
        tenant_id,
        worker,
        decided.text,
        "task",
        principal.key_id,
        decided.thread_id or None,
        conversational=False,
        skill_id=decided.skill_id,
        approval_ref=confirmation_id,
    )
    handle = await start_run(runtime, req)
    result = None
    async for event in handle.events():
        if isinstance(event, RouteDone):
            result = event
    return {
        "confirmation": _plain(decided),
        "run": run_summary(result.record) if result else None,
        "output": result.result.output if result else "",
    }


def _plain(value: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value
