"""The console's channel set-up: which credential fields each platform takes, and "Test connection".

`POST /api/v1/channel/{adapter_id}/test` makes the vendor call a delivery would make first with the
adapter's stored credentials (channels/outbound/check.py) and answers ok or failed with the vendor's
error, never a secret. Tenant-scoped like the IM configuration routes: another tenant's adapter, or one
of a worker the key may not use, answers 404. Credentials themselves are written through
`PUT /api/v1/workers/{worker_id}/im-config`.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from genworker.api.auth import require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import error_responses
from genworker.api.params import AdapterId
from genworker.api.routes.im_config import own_binding
from genworker.auth import Principal
from genworker.channels.outbound.check import CHECKS, check_connection
from genworker.channels.outbound.credentials import credential_fields
from genworker.runtime.composition import Runtime

__all__ = ["router"]

log = logging.getLogger("genworker.channels")

router = APIRouter(prefix="/api/v1/channel", tags=["channels"])

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@router.get("/platforms", summary="Each platform's credential fields (secret, required) and its connection test")
async def platforms(principal: Auth) -> dict[str, Any]:
    return {
        "platforms": [
            {"platform": platform, "check": CHECKS.get(platform), "fields": fields}
            for platform, fields in credential_fields().items()
        ]
    }


@router.post(
    "/{adapter_id}/test",
    summary="Test an adapter's stored credentials against its vendor (auth test or token fetch)",
    responses=error_responses(404),
)
async def connection_test(adapter_id: AdapterId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    """200 whatever the vendor said: `status` is `ok` or `failed`, with `failure` (`refused`, `unavailable`,
    `unreachable`, `mismatch`, `unconfigured`, `unsupported`) and the vendor's `error`, secrets masked."""
    binding = own_binding(principal, runtime, adapter_id)
    result = await check_connection(binding, runtime.services.delivery.endpoints)
    log.info("[Channels] connection test of %s: %s %s", binding.adapter_id, result.status, result.failure or "")
    return result.as_dict()
