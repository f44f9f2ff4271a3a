"""WAITING plans over HTTP: park a plan on a match_key, list and read plans, resume or cancel one
by hand, and deliver a matching event. Tenant-scoped: an event only wakes the caller's tenant."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from genworker.api.auth import principal_worker, require_principal, worker_not_found
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import ID_MAX_LENGTH, ID_SCHEMA_PATTERN, MATCH_KEY_PATTERN, PlanId, WorkerId
from genworker.auth import Principal
from genworker.autonomy.waiting import (
    WaitingPlan,
    WaitingPlanNotFound,
    WaitingService,
    WaitingTransitionError,
    WaitState,
    plan_to_json,
    validate_match_key,
)
from genworker.ids import InvalidIdError
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(tags=["waiting"], responses=error_responses(503))
_WORKER = error_responses(404)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


MatchKey = Annotated[
    str,
    Field(
        max_length=256,
        pattern=MATCH_KEY_PATTERN,
        description="':'-separated words (at least two) of letters, digits and _.-/#@, e.g. github:issue:42:updated",
    ),
]
OptionalId = Annotated[str | None, Field(max_length=ID_MAX_LENGTH, pattern=ID_SCHEMA_PATTERN)]


class WaitBody(RequestBody):
    match_key: MatchKey
    title: str = ""
    timeout_hours: float | None = Field(
        default=None, gt=0, le=720, description="up to 30 days; default: the policy's 24 h"
    )
    text: str | None = Field(default=None, description="the task text routed when the plan resumes")
    duty_id: OptionalId = None
    requires_confirmation: bool = False
    plan_id: OptionalId = None


class EventBody(RequestBody):
    match_key: MatchKey
    event_id: str = Field(min_length=1, max_length=200)
    payload: dict[str, Any] | None = Field(default=None, description="what arrived; the resumed run reads it")


def _scope(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str, WaitingService]:
    tenant_id, worker = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, worker) is None:
        raise worker_not_found(worker_id)
    return tenant_id, worker, runtime.services.waiting


def _key(value: str) -> str:
    try:
        return validate_match_key(value)
    except ValueError as exc:
        raise ApiError(422, "invalid_match_key", f"body.match_key: {exc}") from None


def _json(plan: WaitingPlan) -> dict[str, Any]:
    data = plan_to_json(plan)
    data.pop("schema_version")
    return data


@router.post(
    "/api/v1/workers/{worker_id}/waiting",
    status_code=201,
    summary="Park a plan until an event matches",
    responses=_WORKER,
)
async def create_wait(worker_id: WorkerId, body: WaitBody, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    resume = {k: v for k, v in {"text": body.text, "duty_id": body.duty_id}.items() if v}
    plan = await service.wait(
        tenant_id,
        worker,
        _key(body.match_key),
        title=body.title,
        wait_for=timedelta(hours=body.timeout_hours) if body.timeout_hours else None,
        requires_confirmation=body.requires_confirmation,
        resume=resume,
        plan_id=body.plan_id,
    )
    return {"plan": _json(plan)}


@router.get("/api/v1/workers/{worker_id}/waiting", summary="The worker's WAITING plans", responses=_WORKER)
async def list_waits(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, state: Annotated[WaitState | None, Query()] = None
) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    plans = await service.store.list(tenant_id, worker, state)
    return {"worker_id": worker, "state": state, "plans": [_json(p) for p in plans]}


@router.get("/api/v1/workers/{worker_id}/waiting/{plan_id}", summary="One plan", responses=_WORKER)
async def get_wait(worker_id: WorkerId, plan_id: PlanId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    try:
        plan = await service.store.get(tenant_id, worker, plan_id)
    except InvalidIdError:
        plan = None
    if plan is None:
        raise ApiError(404, "plan_not_found", f"no waiting plan {plan_id!r} for worker {worker_id!r}")
    return {"plan": _json(plan)}


async def _act(runtime: Runtime, principal: Principal, worker_id: str, plan_id: str, action: str) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    try:
        if action == "resume":
            plan = await service.resume_plan(tenant_id, worker, plan_id, by=f"api:{principal.key_id}")
        else:
            plan = await service.cancel(tenant_id, worker, plan_id, by=f"api:{principal.key_id}")
    except (WaitingPlanNotFound, InvalidIdError):
        raise ApiError(404, "plan_not_found", f"no waiting plan {plan_id!r} for worker {worker_id!r}") from None
    except WaitingTransitionError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return {"plan": _json(plan)}


@router.post(
    "/api/v1/workers/{worker_id}/waiting/{plan_id}/resume",
    summary="Resume a plan by hand",
    responses=error_responses(404, 409),
)
async def resume_wait(worker_id: WorkerId, plan_id: PlanId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return await _act(runtime, principal, worker_id, plan_id, "resume")


@router.post(
    "/api/v1/workers/{worker_id}/waiting/{plan_id}/cancel",
    summary="Cancel a waiting or held plan",
    responses=error_responses(404, 409),
)
async def cancel_wait(worker_id: WorkerId, plan_id: PlanId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return await _act(runtime, principal, worker_id, plan_id, "cancel")


@router.post(
    "/api/v1/waiting/events",
    summary="Deliver an event: wake the tenant's plans waiting on its match_key",
    responses=error_responses(403),
)
async def deliver_event(
    body: EventBody,
    principal: Auth,
    runtime: RuntimeDep,
    wait: Annotated[bool, Query(description="also wait for the resumed runs to finish")] = False,
) -> dict[str, Any]:
    service = runtime.services.waiting
    if principal.workers is not None:
        raise ApiError(403, "forbidden", "delivering an event needs a key for every worker of the tenant")
    woken = await service.on_event(principal.tenant_id, _key(body.match_key), body.event_id, body.payload)
    if wait:
        await service.wait_runs(woken)
        found = [await service.store.get(*p.key) for p in woken]
        woken = [p for p in found if p is not None]
    return {"match_key": body.match_key, "woken": [_json(p) for p in woken]}
