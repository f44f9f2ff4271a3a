"""Supervisor policies of a worker (docs/supervisor.md): list, write, attach to a conversation, a
duty's runs or an experiment; and the supervision record kept with a run. Tenant from the key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import RunId, WorkerId, id_path
from genworker.auth import Principal
from genworker.ids import safe_join
from genworker.runtime.composition import Runtime
from genworker.supervision.catalog import PolicyNotFound, attach, list_policies, save_policy
from genworker.supervision.errors import PolicyError
from genworker.supervision.policy import SupervisorPolicy
from genworker.supervision.service import resolve_record, run_record

PolicyName = Annotated[str, id_path("supervisor policy name")]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["supervision"], responses=error_responses(404))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


class AttachAll(BaseModel):
    kind: Literal["all"]
    id: None = None


class AttachTo(BaseModel):
    kind: Literal["conversation", "duty", "experiment"]
    id: str = Field(min_length=1, max_length=200)  # the thread, duty or experiment id


AttachBody = Annotated[AttachAll | AttachTo, Field(discriminator="kind")]


class PolicyBody(SupervisorPolicy):
    """A policy as written to its file; its name is the path's."""

    schema_version: Literal[1] = 1  # the only SCHEMA_VERSION


def _worker_dir(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[Path, str, str]:
    tenant_id, name = loaded_worker(principal, runtime, worker_id).key
    return safe_join(runtime.registry.root, "tenants", tenant_id, "workers", name), tenant_id, name


@router.get("/supervisors", summary="The worker's supervisor policies (a file that cannot be used shows its error)")
async def policies(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    folder, _, _ = _worker_dir(principal, runtime, worker_id)
    return {"policies": await asyncio.to_thread(list_policies, folder)}


async def _policy(folder: Path, change: Callable[[], SupervisorPolicy]) -> dict[str, Any]:
    """Run a change of a policy file in a thread: 404 without the file, 400 naming the field it breaks."""
    try:
        policy = await asyncio.to_thread(change)
    except PolicyNotFound as exc:
        raise ApiError(404, "policy_not_found", str(exc)) from None
    except (PolicyError, ValueError) as exc:
        raise ApiError(400, "invalid_policy", str(exc).replace(str(folder) + "/", "")) from None
    return {"policy": policy.model_dump()}


async def _record(run_id: str, read: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    """A run's supervision record read (or changed) in a thread: 404 without one, 500 unreadable."""
    try:
        record = await asyncio.to_thread(read)
    except PolicyError as exc:
        raise ApiError(500, "supervision_unreadable", str(exc)) from None
    if record is None:
        raise ApiError(404, "not_supervised", f"run {run_id!r} has no supervision record")
    return record


@router.put(
    "/supervisors/{name}", summary="Write a supervisor policy (supervisors/<name>.json)", responses=error_responses(400)
)
async def put_policy(
    worker_id: WorkerId, name: PolicyName, body: PolicyBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    folder, _, _ = _worker_dir(principal, runtime, worker_id)
    return await _policy(folder, partial(save_policy, folder, name, body.model_dump(mode="json", exclude_unset=True)))


@router.post(
    "/supervisors/{name}/attach",
    summary="Attach a policy to a conversation, a duty's runs, an experiment, or all runs",
    responses=error_responses(400),
)
async def attach_policy(
    worker_id: WorkerId, name: PolicyName, body: AttachBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    folder, _, _ = _worker_dir(principal, runtime, worker_id)
    return await _policy(folder, partial(attach, folder, name, body.kind, body.id))


@router.get(
    "/runs/{run_id}/supervision",
    summary="The supervisor's decisions and comments kept with a run, and its state",
    responses=error_responses(500),
)
async def run_supervision(worker_id: WorkerId, run_id: RunId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    _, tenant_id, name = _worker_dir(principal, runtime, worker_id)
    return await _record(run_id, partial(run_record, runtime.registry.root, tenant_id, name, run_id))


@router.post(
    "/runs/{run_id}/supervision/resolve",
    summary="A person has looked: the run's supervisor state becomes resolved (the run's state is untouched)",
    responses=error_responses(500),
)
async def resolve_supervision(
    worker_id: WorkerId, run_id: RunId, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    _, tenant_id, name = _worker_dir(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    return await _record(run_id, partial(resolve_record, runtime.registry.root, tenant_id, name, run_id, by))
