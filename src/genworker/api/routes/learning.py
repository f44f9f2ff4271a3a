"""Learning from feedback over HTTP (docs/learning.md): feedback events on a run's decision, the
learned policy (versions, the one deciding, the freeze, metrics), the decision log, and a person's
commands — apply a version after its shadow period, roll back, unfreeze. Tenant-scoped.

Unknown run or policy version: 404; a command that does not apply now (still in shadow, frozen, nothing to roll back):
409 saying why.
"""

from __future__ import annotations

import asyncio
import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi import Path as PathParam
from pydantic import BeforeValidator, ConfigDict, Field, Strict

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody, json_integer
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import ID_MAX_LENGTH, ID_SCHEMA_PATTERN, WorkerId
from genworker.auth import Principal
from genworker.autonomy.learning import LearningRefused, PolicyVersionNotFound
from genworker.runtime.composition import Runtime
from genworker.worker.governance.snapshots import POLICY_DIR
from genworker.worker.lifecycle import TaskLifecycleError

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["learning"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


Version = Annotated[int, Field(ge=1, le=1_000_000), Strict(False), BeforeValidator(json_integer)]


DECISION_PATTERN = f"^{re.escape(POLICY_DIR)}/[0-9a-f]{{8,64}}\\.json$"


class FeedbackEventBody(RequestBody):
    model_config = ConfigDict(
        json_schema_extra={  # exactly one of the two is a string
            "oneOf": [
                {"required": [name], "properties": {name: {"type": "string"}}} for name in ("run_id", "decision_id")
            ]
        }
    )

    feedback_type: Literal["approve", "reject", "edit_priority", "snooze", "accept_install", "decline_install"]
    run_id: str | None = Field(
        None, max_length=ID_MAX_LENGTH, pattern=ID_SCHEMA_PATTERN, description="the run whose decision it is about"
    )
    decision_id: str | None = Field(
        None, max_length=120, pattern=DECISION_PATTERN, description="or the decision, as the decision log names it"
    )
    old_value: str | None = Field(None, max_length=200, description="e.g. the priority before (edit_priority)")
    new_value: str | None = Field(None, max_length=200, description="e.g. the priority after (edit_priority)")
    note: str | None = Field(None, max_length=2000)
    source: Literal["api", "dashboard", "im"] = "api"


class RollbackBody(RequestBody):
    version: Version | None = Field(None, description="default: the newest applied version")


def _refused(exc: LearningRefused) -> ApiError:
    if isinstance(exc, PolicyVersionNotFound):
        return ApiError(404, "policy_version_not_found", str(exc))
    return ApiError(409, "conflict", str(exc))


@router.post(
    "/feedback-events",
    summary="A person's feedback on the decision behind a run; returns it and any policy change it started in shadow",
    status_code=201,
)
async def add_feedback_event(
    worker_id: WorkerId, body: FeedbackEventBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    if (body.run_id is None) == (body.decision_id is None):
        raise ApiError(422, "validation_error", "body: give one of run_id or decision_id")
    learning, t, w, by = runtime.services.learning, worker.tenant_id, worker.worker_id, f"key:{principal.key_id}"
    extra: dict[str, Any] = {"source": body.source, "note": body.note, "old_value": body.old_value}
    extra["new_value"] = body.new_value
    try:
        if body.run_id is not None:
            event, created = await learning.feedback_on_run(t, w, body.run_id, body.feedback_type, by, **extra)
        else:
            assert body.decision_id is not None
            event, created = await learning.feedback_on_decision(
                t, w, body.decision_id, body.feedback_type, by, **extra
            )
    except (LookupError, TaskLifecycleError) as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return {"feedback": event.as_json(), "shadow_versions": [v.version for v in created]}


@router.get("/feedback-events", summary="Feedback events, newest first")
async def list_feedback_events(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    events = await asyncio.to_thread(runtime.services.learning.store.feedback, worker.tenant_id, worker.worker_id)
    return {"feedback": [e.as_json() for e in reversed(events[-limit:])]}


@router.get("/learning", summary="The learned policy: the version deciding, every version, the freeze, metrics")
async def learning_overview(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, window_days: Annotated[int, Query(ge=1, le=365)] = 30
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    return await runtime.services.learning.overview(worker.tenant_id, worker.worker_id, window_days)


@router.get(
    "/learning/decisions",
    summary="The decision log, newest first: gate decisions, feedback, policy steps, learned priorities, interruptions",
)
async def decision_log(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    kind: Annotated[
        Literal["gate", "feedback", "policy", "priority", "interruption", "retention"] | None, Query()
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    rows = await asyncio.to_thread(runtime.services.learning.store.decisions, worker.tenant_id, worker.worker_id)
    return {"decisions": [r for r in rows if kind is None or r.get("kind") == kind][:limit]}


@router.post(
    "/learning/versions/{version}/apply",
    summary="Apply a policy version whose shadow period is over",
    responses=error_responses(409),
)
async def apply_version(
    worker_id: WorkerId,
    version: Annotated[int, PathParam(ge=1, le=1_000_000, description="the policy version")],
    principal: Auth,
    runtime: RuntimeDep,
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    try:
        applied = await runtime.services.learning.apply(
            worker.tenant_id, worker.worker_id, version, f"key:{principal.key_id}"
        )
    except LearningRefused as exc:
        raise _refused(exc) from None
    return {"version": applied.version, "status": applied.status, "changes": applied.describe()}


@router.post(
    "/learning/rollback",
    summary="Roll back the newest applied policy version (or the one named), in one command",
    responses=error_responses(409),
)
async def rollback(worker_id: WorkerId, body: RollbackBody, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    try:
        ended = await runtime.services.learning.rollback(
            worker.tenant_id, worker.worker_id, f"key:{principal.key_id}", body.version
        )
    except LearningRefused as exc:
        raise _refused(exc) from None
    return {"version": ended.version, "status": ended.status, "changes": ended.describe()}


@router.post(
    "/learning/unfreeze", summary="Learn from feedback again after a spike froze it", responses=error_responses(409)
)
async def unfreeze(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    try:
        await runtime.services.learning.unfreeze(worker.tenant_id, worker.worker_id, f"key:{principal.key_id}")
    except LearningRefused as exc:
        raise _refused(exc) from None
    return {"frozen": None}
