"""A worker's context spaces over HTTP: list them (by state, by review), read one with its facts,
and what a person does with them — confirm a pending NEW, re-file a space into another, take a
merged one back out, pin or unpin one, revert a resurrection, sweep the lifecycle now.
Tenant-scoped like every worker route: another tenant's worker is a 404. docs/context-spaces.md
describes them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from genworker.api.auth import principal_worker, require_principal, worker_not_found
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import ID_MAX_LENGTH, ID_SCHEMA_PATTERN, WorkerId, id_path
from genworker.auth import Principal
from genworker.autonomy.spaces import (
    ContextSpace,
    SpaceError,
    SpaceFileError,
    SpaceNotFound,
    SpaceService,
    SpaceState,
    SpaceTransitionError,
)
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(tags=["spaces"], responses=error_responses(503))
_WORKER = error_responses(404)
_CHANGE = error_responses(404, 409)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SpaceId = Annotated[str, id_path("space id")]
T = TypeVar("T")


class RefileBody(RequestBody):
    target: str = Field(max_length=ID_MAX_LENGTH, pattern=ID_SCHEMA_PATTERN, description="the space to file it into")


class PinBody(RequestBody):
    pinned: bool | None = Field(description="true: pin, false: unpin, null: back to the automatic pins")


class RevertBody(RequestBody):
    event_id: str = Field(max_length=ID_MAX_LENGTH, pattern=ID_SCHEMA_PATTERN, description="the fact that revived it")


def _scope(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str, SpaceService]:
    tenant_id, worker = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, worker) is None:
        raise worker_not_found(worker_id)
    return tenant_id, worker, runtime.services.spaces


def space_json(space: ContextSpace) -> dict[str, Any]:
    data = space.model_dump(mode="json")
    data.pop("schema_version")
    return data


async def _call(worker_id: str, space_id: str, action: Callable[[], Awaitable[T]]) -> T:
    try:
        return await action()
    except SpaceNotFound as exc:
        raise ApiError(404, "space_not_found", f"no context space {exc.space_id!r} for worker {worker_id!r}") from None
    except SpaceTransitionError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except SpaceFileError as exc:
        raise ApiError(409, "space_unreadable", f"{space_id}: {exc}") from None


@router.get("/api/v1/workers/{worker_id}/spaces", summary="The worker's context spaces", responses=_WORKER)
async def list_spaces(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    state: Annotated[SpaceState | None, Query()] = None,
    review: Annotated[Literal["confirmed", "pending", "merged"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    if not await service.exists(tenant_id, worker):
        return {"worker_id": worker, "counts": {}, "spaces": []}
    cards = await service.cards(tenant_id, worker, state=state, review=review, limit=limit, offset=offset)
    return {"worker_id": worker, "counts": await service.count(tenant_id, worker), "spaces": cards}


@router.get("/api/v1/workers/{worker_id}/spaces/{space_id}", summary="One context space", responses=_CHANGE)
async def get_space(worker_id: WorkerId, space_id: SpaceId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    space = await _call(worker_id, space_id, lambda: service.get(tenant_id, worker, space_id))
    return {"space": space_json(space)}


@router.get(
    "/api/v1/workers/{worker_id}/spaces/{space_id}/events",
    summary="The facts a space holds, from the event log",
    responses=_CHANGE,
)
async def space_events(worker_id: WorkerId, space_id: SpaceId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    events = await _call(worker_id, space_id, lambda: service.events(tenant_id, worker, space_id))
    return {"space_id": space_id, "events": [e.model_dump(mode="json") for e in events]}


Change = Callable[[SpaceService, str, str], Awaitable[ContextSpace | list[ContextSpace]]]


async def _change(principal: Principal, runtime: Runtime, worker_id: str, space_id: str, op: Change) -> dict[str, Any]:
    """`op(service, tenant, worker)` on the caller's worker: {"space": ...} or {"spaces": [...]}."""
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    done = await _call(worker_id, space_id, lambda: op(service, tenant_id, worker))
    if isinstance(done, list):
        return {"spaces": [space_json(s) for s in done]}
    return {"space": space_json(done)}


@router.post(
    "/api/v1/workers/{worker_id}/spaces/{space_id}/confirm",
    summary="Confirm a pending NEW space as a space of its own",
    responses=_CHANGE,
)
async def confirm_space(worker_id: WorkerId, space_id: SpaceId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return await _change(principal, runtime, worker_id, space_id, lambda s, t, w: s.confirm(t, w, space_id))


@router.post(
    "/api/v1/workers/{worker_id}/spaces/{space_id}/refile",
    summary="File a space's facts into another space (it is kept, merged)",
    responses=_CHANGE,
)
async def refile_space(
    worker_id: WorkerId, space_id: SpaceId, body: RefileBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    return await _change(principal, runtime, worker_id, space_id, lambda s, t, w: s.refile(t, w, space_id, body.target))


@router.post(
    "/api/v1/workers/{worker_id}/spaces/{space_id}/unmerge",
    summary="Take a merged or re-filed space back out of the space it went into",
    responses=_CHANGE,
)
async def unmerge_space(worker_id: WorkerId, space_id: SpaceId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return await _change(principal, runtime, worker_id, space_id, lambda s, t, w: s.unmerge(t, w, space_id))


@router.post(
    "/api/v1/workers/{worker_id}/spaces/{space_id}/pin",
    summary="Pin or unpin a space, or hand it back to the automatic pins",
    responses=_CHANGE,
)
async def pin_space(
    worker_id: WorkerId, space_id: SpaceId, body: PinBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    return await _change(principal, runtime, worker_id, space_id, lambda s, t, w: s.pin(t, w, space_id, body.pinned))


@router.post(
    "/api/v1/workers/{worker_id}/spaces/{space_id}/revert",
    summary="Revert a resurrection: the space goes back, the fact gets a space of its own",
    responses=_CHANGE,
)
async def revert_space(
    worker_id: WorkerId, space_id: SpaceId, body: RevertBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    return await _change(
        principal, runtime, worker_id, space_id, lambda s, t, w: s.revert(t, w, space_id, body.event_id)
    )


@router.post(
    "/api/v1/workers/{worker_id}/spaces/sweep",
    summary="Move spaces to the lifecycle state their last activity and pins say, now",
    responses=_CHANGE,
)
async def sweep_spaces(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker, service = _scope(principal, runtime, worker_id)
    try:
        changed = await service.sweep(tenant_id, worker)
    except SpaceError as exc:
        raise ApiError(409, "space_unreadable", str(exc)) from None
    return {"worker_id": worker, "changed": changed, "counts": await service.count(tenant_id, worker)}
