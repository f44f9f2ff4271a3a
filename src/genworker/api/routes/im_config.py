"""IM configuration of a worker and the status of its channel adapters.

Tenant-scoped like every worker route: the tenant is the API key's, and a worker or adapter the
key may not use answers 404. Secrets are write-only (shown as "set" / "unset"). A PUT merges a
partial credentials update, validates it, then writes CHANNEL_CREDENTIALS.json atomically and
reloads that worker and only its channel clients; a bad body changes nothing stored.
"""

from __future__ import annotations

import asyncio
import types
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, SecretStr, create_model

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import AdapterId, WorkerId
from genworker.auth import Principal
from genworker.channels.outbound.credentials import CredentialsError, credentials_view, save_credentials
from genworker.channels.registry import ChannelBinding, ChannelRegistry, split_adapter_id
from genworker.runtime.composition import Runtime
from genworker.workspace.models.credentials import ChannelCredentials
from genworker.workspace.registry import ReloadOutcome

router = APIRouter(prefix="/api/v1", tags=["channels"], responses=error_responses(404))
_DELIVERY = error_responses(503)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _wire(annotation: Any) -> Any:
    """A credentials field's type as JSON carries it: a secret is a string; None removes the field."""
    args = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    kinds = [str if arg is SecretStr else arg for arg in args if arg is not type(None)]
    return kinds[0] | None


def _update_model(model: type[BaseModel]) -> type[BaseModel]:
    fields: Any = {name: (_wire(info.annotation), None) for name, info in model.model_fields.items()}
    return create_model(f"{model.__name__}Update", __base__=RequestBody, **fields)


def _platform(annotation: Any) -> type[BaseModel]:
    return next(arg for arg in get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel))


_PLATFORMS: Any = {
    platform: (_update_model(_platform(info.annotation)) | None, None)
    for platform, info in ChannelCredentials.model_fields.items()
}
CredentialsUpdate: Any = create_model("CredentialsUpdate", __base__=RequestBody, **_PLATFORMS)


class ImConfigBody(RequestBody):
    """A partial update: a platform or field given as null is removed, one not given is kept."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"credentials": {"slack": {"bot_token": "xoxb-...", "app_token": None}}}]},
    )
    credentials: CredentialsUpdate


def _worker(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str]:
    return loaded_worker(principal, runtime, worker_id).key


def _channels(runtime: Runtime) -> ChannelRegistry:
    return ChannelRegistry(runtime.registry)


def _outcome(outcome: ReloadOutcome) -> dict[str, Any]:
    return {
        "ok": outcome.ok,
        "kept_last_good": outcome.kept_last_good,
        "errors": [i.as_dict() for i in outcome.errors],
    }


def _config(runtime: Runtime, tenant_id: str, worker_id: str) -> dict[str, Any]:
    worker = runtime.registry.worker(tenant_id, worker_id)
    assert worker is not None
    return {
        "worker_id": worker_id,
        "channels": [
            {**b.channel.model_dump(mode="json"), "adapter_id": b.adapter_id, "key": b.key}
            for b in _channels(runtime).bindings(tenant_id, worker_id)
        ],
        "credentials": credentials_view(worker.credentials),
    }


@router.get("/workers/{worker_id}/im-config", summary="Channels bound to a worker and its credentials (secrets hidden)")
async def get_im_config(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    return _config(runtime, tenant_id, worker)


@router.put(
    "/workers/{worker_id}/im-config",
    summary="Update a worker's channel credentials (partial, validated)",
    responses=error_responses(409),
)
async def put_im_config(
    worker_id: WorkerId, body: ImConfigBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    """409 when the stored credentials with this update would not be complete (a platform's required
    field neither stored nor given); nothing is written then."""
    tenant_id, worker = _worker(principal, runtime, worker_id)
    update = body.credentials.model_dump(exclude_unset=True)
    folder = runtime.registry.root / "tenants" / tenant_id / "workers" / worker
    try:
        await asyncio.to_thread(save_credentials, folder, update)
    except CredentialsError as exc:  # the shape is the body model's: what is left depends on what is stored
        raise ApiError(409, "credentials_incomplete", str(exc)) from None
    outcome = await asyncio.to_thread(runtime.registry.reload_worker, tenant_id, worker)
    reloaded = runtime.services.delivery.reload(tenant_id, worker)
    return {**_config(runtime, tenant_id, worker), "reload": {**_outcome(outcome), "clients_reset": reloaded}}


@router.post(
    "/workers/{worker_id}/im-config/reload",
    summary="Reload a worker's files and only its channel clients",
    responses=_DELIVERY,
)
async def reload_im_config(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    outcome = await asyncio.to_thread(runtime.registry.reload_worker, tenant_id, worker)
    reloaded = runtime.services.delivery.reload(tenant_id, worker)
    return {"worker_id": worker, **_outcome(outcome), "clients_reset": reloaded}


@router.get(
    "/workers/{worker_id}/im-config/status",
    summary="Delivery status of each of a worker's channels",
    responses=_DELIVERY,
)
async def im_config_status(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    delivery = runtime.services.delivery
    bindings = _channels(runtime).bindings(tenant_id, worker)
    return {"worker_id": worker, "channels": [delivery.status(b) for b in bindings]}


@router.get("/channel", summary="The caller's tenant's channel adapters", responses=_DELIVERY)
async def list_adapters(principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    delivery = runtime.services.delivery
    mine = [
        b for b in _channels(runtime).all() if b.tenant_id == principal.tenant_id and principal.can_use(b.worker_id)
    ]
    return {"tenant_id": principal.tenant_id, "adapters": [delivery.status(b) for b in mine]}


@router.get(
    "/channel/{adapter_id}/status",
    summary="One adapter: connected / degraded, last delivery, last error",
    responses=_DELIVERY,
)
async def adapter_status(adapter_id: AdapterId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    binding = own_binding(principal, runtime, adapter_id)
    return runtime.services.delivery.status(binding)


def own_binding(principal: Principal, runtime: Runtime, adapter_id: str) -> ChannelBinding:
    """The adapter when it is the key's tenant's and its worker one the key may use; else 404 (never 403)."""
    parts = split_adapter_id(adapter_id)
    binding = _channels(runtime).resolve(adapter_id) if parts is not None else None
    if binding is None or binding.tenant_id != principal.tenant_id or not principal.can_use(binding.worker_id):
        raise ApiError(404, "adapter_not_found", f"channel adapter {adapter_id!r} not found")
    return binding
