"""The Conflict Arbiter over HTTP (docs/conflicts.md): conflict cases of the caller's tenant, a
person's decision on an escalated one, and plans (declare one with its effects, read its state).

Tenant-scoped: a key sees the cases either of whose plans belongs to a worker it may use. Unknown
case or plan: 404; a case already settled, or a plan declared again after it ended: 409.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BeforeValidator, Field, Strict

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody, json_integer
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.evidence import PlannedEffectBody
from genworker.api.params import ID_MAX_LENGTH, ID_SCHEMA_PATTERN, WorkerId, id_path
from genworker.auth import Principal
from genworker.autonomy.conflicts import (
    ConflictCase,
    ConflictNotFound,
    ConflictNotOpen,
    EffectRecord,
    IllegalPlanTransition,
    PlanState,
)
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(tags=["conflicts"], responses=error_responses(503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ConflictId = Annotated[str, id_path("conflict id")]
ConflictPlanId = Annotated[str, id_path("plan id (a run id, or the id a plan was declared with)")]


class DecisionBody(RequestBody):
    decision: Literal["proceed", "drop"] = Field(
        description="proceed: the later plan (plan_b) goes ahead; drop: it is dropped"
    )


TtlSeconds = Annotated[int, Field(ge=1, le=30 * 86_400), Strict(False), BeforeValidator(json_integer)]


class PlanBody(RequestBody):
    plan_id: str = Field(max_length=ID_MAX_LENGTH, pattern=ID_SCHEMA_PATTERN)
    effects: list[PlannedEffectBody] = Field(min_length=1, max_length=50)
    ttl_seconds: TtlSeconds | None = Field(
        None,
        description="without a commit for this long the plan expires and releases its claims "
        "(default: the tenant's conflict.declared_plan_ttl_seconds, 24 h); each commit renews it",
    )


class FinishBody(RequestBody):
    state: Literal["succeeded", "failed", "rolled_back"]
    reason: str = Field("", max_length=500)


def _visible(principal: Principal, case: ConflictCase) -> bool:
    return any(w and principal.can_use(w) for w in (case.worker_a_id, case.worker_b_id))


async def _case(principal: Principal, runtime: Runtime, conflict_id: str) -> ConflictCase:
    store = runtime.services.conflicts.store
    try:
        case = await asyncio.to_thread(store.case, principal.tenant_id, conflict_id)
    except ConflictNotFound:
        case = None
    if case is None or not _visible(principal, case):
        raise ApiError(404, "conflict_not_found", f"no conflict {conflict_id!r}")
    return case


@router.get("/api/v1/conflicts", summary="Conflict cases of the tenant, newest first")
async def list_conflicts(
    principal: Auth,
    runtime: RuntimeDep,
    status: Annotated[Literal["open", "resolved", "dropped"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> dict[str, Any]:
    store = runtime.services.conflicts.store
    cases = await asyncio.to_thread(store.cases, principal.tenant_id, status=status, limit=limit)
    return {"conflicts": [c.as_json() for c in cases if _visible(principal, c)]}


@router.get("/api/v1/conflicts/{conflict_id}", summary="One conflict case", responses=error_responses(404))
async def get_conflict(conflict_id: ConflictId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return {"conflict": (await _case(principal, runtime, conflict_id)).as_json()}


@router.post(
    "/api/v1/conflicts/{conflict_id}/resolve",
    summary="A person's decision on an escalated conflict; the call its plan waits on is approved or rejected",
    responses=error_responses(404, 409),
)
async def resolve_conflict(
    conflict_id: ConflictId, body: DecisionBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    case = await _case(principal, runtime, conflict_id)
    try:
        settled, call = await runtime.services.conflicts.decide(
            principal.tenant_id, case.conflict_id, body.decision, f"key:{principal.key_id}"
        )
    except ConflictNotOpen as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return {"conflict": settled.as_json(), "call": call}


@router.post(
    "/api/v1/workers/{worker_id}/plans",
    summary="Declare a plan and what it will change; returns the conflicts found at plan time",
    status_code=201,
    responses=error_responses(404, 409),
)
async def declare_plan(worker_id: WorkerId, body: PlanBody, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    t, w = worker.tenant_id, worker.worker_id
    effects = [
        EffectRecord(body.plan_id, t, w, e.resource_key, e.operation, e.expected_version, e.reversibility)
        for e in body.effects
    ]
    try:
        plan, cases = await runtime.services.conflicts.arbiter.plan(
            t, w, body.plan_id, effects, run_bound=False, ttl_s=body.ttl_seconds
        )
    except IllegalPlanTransition as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return {"plan": plan.as_json(), "conflicts": [c.as_json() for c in cases]}


@router.get(
    "/api/v1/workers/{worker_id}/plans/{plan_id}",
    summary="A plan's state (Steward's state machine) and history; a declared plan past its ttl is expired first",
    responses=error_responses(404),
)
async def get_plan(
    worker_id: WorkerId, plan_id: ConflictPlanId, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    store = runtime.services.conflicts.store
    plan = await runtime.services.conflicts.arbiter.expire_if_due(worker.tenant_id, worker.worker_id, plan_id)
    if plan is None:
        raise ApiError(404, "plan_not_found", f"no plan {plan_id!r} for worker {worker_id!r}")
    cases = await asyncio.to_thread(store.cases, worker.tenant_id, plan_id=plan_id)
    return {"plan": plan.as_json(), "conflicts": [c.as_json() for c in cases]}


@router.post(
    "/api/v1/workers/{worker_id}/plans/{plan_id}/finish",
    summary="A declared plan ended: its claims on resources are released",
    responses=error_responses(404),
)
async def finish_plan(
    worker_id: WorkerId, plan_id: ConflictPlanId, body: FinishBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    service = runtime.services.conflicts
    t, w = worker.tenant_id, worker.worker_id
    if await asyncio.to_thread(service.store.plan, t, w, plan_id) is None:
        raise ApiError(404, "plan_not_found", f"no plan {plan_id!r} for worker {worker_id!r}")
    await service.arbiter.finish(t, w, plan_id, PlanState(body.state), body.reason or "finished over the API")
    plan = await asyncio.to_thread(service.store.plan, t, w, plan_id)
    assert plan is not None
    return {"plan": plan.as_json()}
