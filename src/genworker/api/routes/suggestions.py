"""Suggestions (list, approve, reject, run the detectors now) and feedback. Tenant-scoped.

Unknown suggestion: 404; already decided: 409; approving one whose effect cannot be applied (its
skill already exists, say): 422, and the suggestion stays pending.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import SuggestionId, WorkerId
from genworker.auth import Principal
from genworker.autonomy.suggestions import (
    SuggestionDecided,
    SuggestionDetectors,
    SuggestionNotFound,
)
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["suggestions"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


class FeedbackBody(RequestBody):
    text: str = Field(min_length=1, max_length=4000, pattern=r"\S", description="not only white space")


@router.get("/suggestions", summary="Suggestions, newest first")
async def list_suggestions(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    status: Annotated[Literal["pending", "approved", "rejected"] | None, Query()] = "pending",
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    store = runtime.services.suggestions.store
    items = await asyncio.to_thread(store.list, worker.tenant_id, worker.worker_id, status)
    return {"worker_id": worker.worker_id, "suggestions": [asdict(s) for s in items]}


@router.post("/suggestions/detect", summary="Run the suggestion detectors now; returns the new suggestions")
async def detect(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    aggregate = runtime.services.suggestions
    found = await SuggestionDetectors(aggregate.store, runtime.services.router.tasks, aggregate.goals).run(worker)
    return {"worker_id": worker.worker_id, "created": [asdict(s) for s in found]}


@router.post(
    "/suggestions/{suggestion_id}/{decision}",
    summary="Approve (applies it) or reject a suggestion",
    responses=error_responses(409),
)
async def decide(
    worker_id: WorkerId,
    suggestion_id: SuggestionId,
    decision: Literal["approve", "reject"],
    principal: Auth,
    runtime: RuntimeDep,
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    aggregate = runtime.services.suggestions
    by = f"key:{principal.key_id}"
    try:
        decided = await asyncio.to_thread(
            aggregate.decide, worker.tenant_id, worker.worker_id, suggestion_id, decision, by
        )
    except SuggestionNotFound as exc:
        raise ApiError(404, "suggestion_not_found", str(exc)) from None
    except SuggestionDecided as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except (ValueError, KeyError, LookupError) as exc:
        raise ApiError(422, "suggestion_not_applied", f"{type(exc).__name__}: {exc}") from None
    return {"suggestion": asdict(decided)}


@router.post("/feedback", summary="Record feedback for the worker", status_code=201)
async def add_feedback(worker_id: WorkerId, body: FeedbackBody, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    try:
        entry = await asyncio.to_thread(
            runtime.services.feedback.add, worker.tenant_id, worker.worker_id, body.text, f"key:{principal.key_id}"
        )
    except ValueError as exc:  # white space only, as str.strip() sees it
        raise ApiError(422, "validation_error", f"body.text: {exc}") from None
    return {"feedback": entry}


@router.get("/feedback", summary="Recorded feedback, newest first")
async def list_feedback(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    items = await asyncio.to_thread(runtime.services.feedback.list, worker.tenant_id, worker.worker_id, limit)
    return {"worker_id": worker.worker_id, "feedback": items}
