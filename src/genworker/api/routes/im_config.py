"""IM configuration of a worker and the status of its channel adapters.

Tenant-scoped like every worker route: the tenant is the API key's, and a worker or adapter the
key may not use answers 404. Secrets are write-only (shown as "set" / "unset"). A PUT merges a
partial credentials update, validates it, then writes CHANNEL_CREDENTIALS.json atomically and
reloads that worker and only its channel clients; a bad body changes nothing stored.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError
from genworker.auth import Principal
from genworker.channels.outbound.credentials import CredentialsError, credentials_view, save_credentials
from genworker.channels.outbound.delivery import ChannelDelivery
from genworker.channels.registry import ChannelBinding, ChannelRegistry, split_adapter_id
from genworker.runtime.composition import Runtime
from genworker.workspace.registry import ReloadOutcome

router = APIRouter(prefix="/api/v1", tags=["channels"])

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _delivery(runtime: Runtime) -> ChannelDelivery:
    delivery: ChannelDelivery | None = getattr(runtime, "channel_replier", None)
    if delivery is None:
        raise ApiError(503, "unavailable", "channel delivery is not running")
    return delivery


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
async def get_im_config(worker_id: str, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    return _config(runtime, tenant_id, worker)


@router.put("/workers/{worker_id}/im-config", summary="Update a worker's channel credentials (partial, validated)")
async def put_im_config(
    worker_id: str, principal: Auth, runtime: RuntimeDep, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    update = body.get("credentials")
    unknown = sorted(set(body) - {"credentials"})
    if not isinstance(update, dict) or unknown:
        detail = f"unknown top-level fields: {', '.join(unknown)}" if unknown else "'credentials' must be an object"
        raise ApiError(422, "validation_error", f"body: {detail} ({{'credentials': {{platform: {{field: value}}}}}})")
    folder = runtime.registry.root / "tenants" / tenant_id / "workers" / worker
    try:
        await asyncio.to_thread(save_credentials, folder, update)
    except CredentialsError as exc:
        raise ApiError(422, "validation_error", str(exc)) from None
    outcome = await asyncio.to_thread(runtime.registry.reload_worker, tenant_id, worker)
    delivery: ChannelDelivery | None = getattr(runtime, "channel_replier", None)
    reloaded = delivery.reload(tenant_id, worker) if delivery is not None else []
    return {**_config(runtime, tenant_id, worker), "reload": {**_outcome(outcome), "clients_reset": reloaded}}


@router.post("/workers/{worker_id}/im-config/reload", summary="Reload a worker's files and only its channel clients")
async def reload_im_config(worker_id: str, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    outcome = await asyncio.to_thread(runtime.registry.reload_worker, tenant_id, worker)
    reloaded = _delivery(runtime).reload(tenant_id, worker)
    return {"worker_id": worker, **_outcome(outcome), "clients_reset": reloaded}


@router.get("/workers/{worker_id}/im-config/status", summary="Delivery status of each of a worker's channels")
async def im_config_status(worker_id: str, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    delivery = _delivery(runtime)
    bindings = _channels(runtime).bindings(tenant_id, worker)
    return {"worker_id": worker, "channels": [delivery.status(b) for b in bindings]}


@router.get("/channel", summary="The caller's tenant's channel adapters")
async def list_adapters(principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    delivery = _delivery(runtime)
    mine = [
        b for b in _channels(runtime).all() if b.tenant_id == principal.tenant_id and principal.can_use(b.worker_id)
    ]
    return {"tenant_id": principal.tenant_id, "adapters": [delivery.status(b) for b in mine]}


@router.get("/channel/{adapter_id}/status", summary="One adapter: connected / degraded, last delivery, last error")
async def adapter_status(adapter_id: str, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    binding = _own_binding(principal, runtime, adapter_id)
    return _delivery(runtime).status(binding)


def _own_binding(principal: Principal, runtime: Runtime, adapter_id: str) -> ChannelBinding:
    parts = split_adapter_id(adapter_id)
    binding = _channels(runtime).resolve(adapter_id) if parts is not None else None
    if binding is None or binding.tenant_id != principal.tenant_id or not principal.can_use(binding.worker_id):
        raise ApiError(404, "adapter_not_found", f"channel adapter {adapter_id!r} not found")
    return binding
