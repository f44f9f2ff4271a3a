"""Run a worker's duty now, and read its execution records. Tenant-scoped: another tenant's worker is 404."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from pydantic import Field, TypeAdapter

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.evidence import EXAMPLE, EvidenceBody, evidence_of
from genworker.api.params import DutyId, RunId, WorkerId
from genworker.api.routes.chat import run_summary
from genworker.auth import Principal
from genworker.autonomy.duties import DutyNotFound, DutyStateError, aps_trigger
from genworker.autonomy.duties.delivery import NothingHeld
from genworker.runtime.composition import Runtime
from genworker.worker.contract_record import DeliveryRecord
from genworker.worker.lifecycle import RunNotFound
from genworker.worker.task import RunRef
from genworker.workspace.models.duty import DutyStatus, ScheduleTrigger

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/duties", tags=["duties"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
_DELIVERIES = TypeAdapter(tuple[DeliveryRecord, ...])
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


class RunDutyBody(RequestBody):
    trigger_id: str | None = Field(None, description="default: the duty's manual trigger", examples=["now"])
    evidence: EvidenceBody | None = Field(
        None, description="an inferred action's evidence for the Policy Gate", examples=[EXAMPLE]
    )


def _duty_not_found(duty_id: str) -> ApiError:
    return ApiError(404, "duty_not_found", f"no duty {duty_id!r}")


@router.get("", summary="The worker's duties: status, triggers and the next fire of each schedule trigger")
async def list_duties(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    now = datetime.now(UTC)
    duties = []
    for duty in sorted(worker.duties.values(), key=lambda d: d.duty_id):
        triggers = []
        for trigger in duty.triggers:
            entry: dict[str, Any] = trigger.model_dump(mode="json", exclude_defaults=True)
            entry.update(id=trigger.id, type=trigger.type)
            if isinstance(trigger, ScheduleTrigger) and duty.status == DutyStatus.ACTIVE:
                upcoming = await asyncio.to_thread(aps_trigger(trigger).get_next_fire_time, None, now)
                entry["next_fire"] = upcoming.astimezone(UTC).isoformat() if upcoming is not None else None
            triggers.append(entry)
        duties.append({"duty_id": duty.duty_id, "title": duty.title, "status": str(duty.status), "triggers": triggers})
    return {"worker_id": worker.worker_id, "duties": duties}


@router.post("/{duty_id}/run", summary="Run a duty now through its manual trigger; returns the run")
async def run_duty(
    worker_id: WorkerId,
    duty_id: DutyId,
    principal: Auth,
    runtime: RuntimeDep,
    body: RunDutyBody | None = None,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    body = body or RunDutyBody()
    try:
        fired = await runtime.services.duties.run_manual(
            worker, duty_id, body.trigger_id, idempotency_key=idempotency_key, evidence=evidence_of(body.evidence)
        )
    except DutyNotFound:
        raise _duty_not_found(duty_id) from None
    return {
        "duty_id": duty_id,
        "trigger_id": fired.run.provenance.trigger_id,
        "created": fired.created,
        "idempotency_key": fired.key,
        "run": run_summary(fired.run),
    }


@router.get("/{duty_id}/executions", summary="The duty's execution records, oldest first")
async def list_executions(worker_id: WorkerId, duty_id: DutyId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    if duty_id not in worker.duties:
        raise _duty_not_found(duty_id)
    try:
        store = runtime.services.duties.store
        records = await asyncio.to_thread(store.executions, worker.tenant_id, worker.worker_id, duty_id)
    except DutyStateError as exc:
        raise ApiError(500, "duty_state_unreadable", str(exc)) from None
    return {"duty_id": duty_id, "executions": [r.model_dump(mode="json") for r in records]}


@router.post(
    "/{duty_id}/runs/{run_id}/release",
    summary="Send the result a run held (its posture only proposes) to the duty's destinations",
    responses=error_responses(409),
)
async def release_result(
    worker_id: WorkerId, duty_id: DutyId, run_id: RunId, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    """A person's go for a held result (listed in the worker's brief): each destination it was held
    from is planned and sent as a completed run's are, once (409 `nothing_held` otherwise)."""
    worker = loaded_worker(principal, runtime, worker_id)
    duty = worker.duties.get(duty_id)
    if duty is None:
        raise _duty_not_found(duty_id)
    outcomes = runtime.services.duty_outcomes
    try:
        run = await outcomes.delivery.release(worker, duty, RunRef(*worker.key, run_id))
    except RunNotFound:
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {worker_id!r}") from None
    except NothingHeld as exc:
        raise ApiError(409, "nothing_held", str(exc)) from None
    return {"run_id": run_id, "deliveries": _DELIVERIES.dump_python(run.deliveries, mode="json")}
