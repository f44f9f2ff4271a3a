"""Request dependencies shared by the routes: the started runtime, the API keys, the limiters.

The app factory (`api/app.py`) declares everything it keeps on `app.state` and sets it once the
runtime has started; nothing else writes there. Routes reach the runtime's services as
`runtime.services` (runtime/assembly.py), each typed and always built on a started runtime.
"""

from __future__ import annotations

import hmac
from ipaddress import ip_address
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from genworker.api.ratelimit import Limiter
from genworker.auth import ApiKeyStore
from genworker.runtime.composition import Runtime

__all__ = [
    "RuntimeDep",
    "api_keys_of",
    "get_runtime",
    "require_admin",
    "runtime_of",
    "service_limiters_of",
]


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime | None = request.app.state.runtime
    if runtime is None:
        raise HTTPException(503, "runtime is starting")
    return runtime


def api_keys_of(request: Request) -> ApiKeyStore:
    """The tenants' API keys over the runtime's workspace."""
    store: ApiKeyStore | None = request.app.state.api_keys
    if store is None:
        raise HTTPException(503, "runtime is starting")
    return store


def service_limiters_of(request: Request) -> tuple[Limiter, Limiter]:
    """The anonymous service route's limits: per client and worker, per worker."""
    limiters: tuple[Limiter, Limiter] | None = request.app.state.service_limiters
    if limiters is None:
        raise HTTPException(503, "runtime is starting")
    return limiters


# The dependencies are `async def`: FastAPI runs a plain `def` dependency in its thread pool, one
# thread hand-off and back per request for a lookup on `app.state`.


async def get_runtime(request: Request) -> Runtime:
    return runtime_of(request)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


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
