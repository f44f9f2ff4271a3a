"""A worker's inbox and heartbeat: list items, requeue one, run a heartbeat now, read its state.

Tenant-scoped like every route: the tenant is the key's, and a worker the key may not use is 404.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import InboxItemId, WorkerId
from genworker.api.routes.chat import run_summary
from genworker.api.runs import router_of
from genworker.auth import Principal
from genworker.autonomy.heartbeat import HeartbeatFileError, describe_entry, job_id, meta_json
from genworker.autonomy.inbox import InboxItemNotFoundError, InboxState, InvalidTransitionError
from genworker.autonomy.inbox.codec import item_to_json
from genworker.ids import InvalidIdError, validate_id
from genworker.runtime.composition import Runtime
from genworker.worker.lifecycle import RunNotFound
from genworker.worker.task import RunRef

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["autonomy"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _worker(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str]:
    return loaded_worker(principal, runtime, worker_id).key


@router.get("/inbox", summary="A worker's inbox items, oldest first, with the count in each state")
async def list_inbox(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    state: InboxState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    inbox = runtime.services.inbox
    items = await inbox.list(tenant_id, worker, state, limit=limit, offset=offset)
    counts = await inbox.counts(tenant_id, worker)
    return {
        "worker_id": worker,
        "state": state.value if state else None,
        "counts": {s.value: n for s, n in counts.items()},
        "items": [item_to_json(i) for i in items],
    }


@router.post(
    "/inbox/{item_id}/requeue",
    summary="Make a failed, dead or abandoned item pending again",
    responses=error_responses(409),
)
async def requeue_item(
    worker_id: WorkerId, item_id: InboxItemId, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    aggregate = runtime.services.inbox_aggregate
    not_found = ApiError(404, "inbox_item_not_found", f"no inbox item {item_id!r} for worker {worker_id!r}")
    try:
        validate_id(item_id, "inbox item id")
        item = await aggregate.requeue(tenant_id, worker, item_id)
    except (InboxItemNotFoundError, InvalidIdError):
        raise not_found from None
    except InvalidTransitionError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return {"item": item_to_json(item)}


@router.post("/heartbeat/run", summary="Run the worker's heartbeat once, now")
async def run_heartbeat(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    wait: Annotated[bool, Query(description="also wait for the tasks and isolated runs it starts")] = False,
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    service = runtime.services.heartbeat
    try:
        report = await service.run_once(tenant_id, worker)
    except HeartbeatFileError as exc:
        raise ApiError(500, "heartbeat_state_unreadable", str(exc)) from None
    body: dict[str, Any] = {"report": report.as_json(), "runs": []}
    if wait and report.run_ids:
        await service.runner.wait_runs(report.run_ids)
        tasks = router_of(runtime).tasks
        runs = []
        for run_id in report.run_ids:
            try:
                runs.append(run_summary(await tasks.get_run(RunRef(tenant_id, worker, run_id))))
            except RunNotFound:
                continue
        body["runs"] = runs
    return body


@router.get("/heartbeat", summary="The worker's heartbeat state: meta, schedule and concerns in their window")
async def heartbeat_state(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    service = runtime.services.heartbeat
    try:
        meta = await service.meta(tenant_id, worker)
        concerns = await service.runner.ledger.entries(tenant_id, worker)
    except HeartbeatFileError as exc:
        raise ApiError(500, "heartbeat_state_unreadable", str(exc)) from None
    job = service.scheduler.jobs().get(job_id(tenant_id, worker))
    next_run = getattr(job, "next_run_time", None)
    return {
        "worker_id": worker,
        "scheduled": job is not None,
        "interval_s": service.settings.interval_s,
        "next_run_at": next_run.isoformat() if next_run is not None else None,
        "last_error": service.scheduler.last_error.get((tenant_id, worker)),
        "meta": meta_json(meta) if meta is not None else None,
        "attention": [describe_entry(e) for e in concerns],
    }
