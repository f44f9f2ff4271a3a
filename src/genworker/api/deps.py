"""Request dependencies shared by the routes."""

from __future__ import annotations

import hmac
from ipaddress import ip_address

from fastapi import HTTPException, Request

from genworker.runtime.composition import Runtime

__all__ = ["get_runtime", "require_admin", "runtime_of"]


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime | None = getattr(request.app.state, "runtime", None)
    if runtime is None:
        raise HTTPException(503, "runtime is starting")
    return runtime


# The dependencies are `async def`: FastAPI runs a plain `def` dependency in its thread pool, one
# thread hand-off and back per request for a lookup on `app.state`.


async def get_runtime(request: Request) -> Runtime:
    return runtime_of(request)


async def require_admin(request: Request) -> None:
    """Operator endpoints: `Authorization: Bearer $GENWORKER_ADMIN_TOKEN`, or loopback when
    no admin token is configured."""
    runtime = runtime_of(request)
    token = runtime.settings.admin_token
    if token:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "Authorization header must be 'Bearer <GENWORKER_ADMIN_TOKEN>'")
        return
    host = request.client.host if request.client else ""
    try:
        loopback = ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise HTTPException(403, "operator endpoint: set GENWORKER_ADMIN_TOKEN to call it from another host")
