"""Who may call the API: API key authentication, tenant scoping of worker names, and CORS.

The tenant of a request is always the tenant of its key; a tenant named in the body or a
header is never trusted. A worker the key may not use answers 404, like a worker that does
not exist, so a key cannot probe other tenants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware

from genworker.api.deps import api_keys_of
from genworker.api.errors import ApiError
from genworker.auth import ApiKeyStore, Principal
from genworker.dashboard.session import CsrfRefused, session_principal
from genworker.ids import InvalidIdError, validate_id
from genworker.runtime.composition import Runtime
from genworker.workspace.snapshot import Worker

__all__ = [
    "API_KEY_SCHEME",
    "get_api_keys",
    "install_cors",
    "loaded_worker",
    "principal_worker",
    "require_principal",
    "worker_not_found",
]

_BEARER_HINT = "send 'Authorization: Bearer <api key>' (create one with `genworker keys create --tenant T`)"
API_KEY_SCHEME: Final = "ApiKey"


class _DeclaredBearer(HTTPBearer):
    """Puts the bearer scheme in OpenAPI for every route that needs a key; reads nothing itself
    (`require_principal` does, to name what is wrong with a header)."""

    async def __call__(self, request: Request) -> None:  # type: ignore[override]
        return None


_declared = _DeclaredBearer(
    scheme_name=API_KEY_SCHEME, description="a tenant API key: `genworker keys create --tenant T`", auto_error=False
)


def get_api_keys(request: Request) -> ApiKeyStore:
    """The app's key store, over the runtime's workspace."""
    return api_keys_of(request)


async def require_principal(request: Request, _scheme: Annotated[None, Depends(_declared)] = None) -> Principal:
    """The caller's principal from `Authorization: Bearer <key>`, else from the dashboard's session
    cookie (state changes then need its CSRF header); 401 otherwise.

    A key the cache knows is verified on the event loop (one `stat` of its tenant's key file); anything
    else may read key files, so it runs in the threadpool.
    """
    header = request.headers.get("authorization")
    if header and request.app.state.api_keys is not None:
        store = api_keys_of(request)
        principal = store.verify_cached(_bearer_token(header))
        if principal is not None:
            request.state.principal = principal
            return principal
    return await run_in_threadpool(_verified_principal, request)


def _verified_principal(request: Request) -> Principal:
    """`require_principal` through the key files (blocking)."""
    header = request.headers.get("authorization")
    if not header:
        try:
            from_cookie = session_principal(request, get_api_keys(request))
        except CsrfRefused as exc:
            raise ApiError(403, "csrf_failed", str(exc)) from None
        if from_cookie is not None:
            request.state.principal = from_cookie
            return from_cookie
        raise _unauthorized(f"missing API key: {_BEARER_HINT}")
    principal = get_api_keys(request).verify(_bearer_token(header))
    if principal is None:
        raise _unauthorized("invalid or revoked API key")
    request.state.principal = principal
    return principal


def _bearer_token(header: str) -> str:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized(f"malformed Authorization header: {_BEARER_HINT}")
    return token.strip()


def principal_worker(principal: Principal, worker: str) -> tuple[str, str]:
    """(tenant_id, worker_id) for `worker` or `tenant/worker`, scoped to the key's tenant and workers.

    It only checks what the key allows; the caller still checks that the worker exists.
    """
    tenant_id, sep, worker_id = worker.partition("/")
    if not sep:
        tenant_id, worker_id = principal.tenant_id, worker
    try:
        validate_id(worker_id)
    except InvalidIdError:
        raise worker_not_found(worker) from None
    if tenant_id != principal.tenant_id or not principal.can_use(worker_id):
        raise worker_not_found(worker)
    return tenant_id, worker_id


def worker_not_found(worker: str) -> ApiError:
    return ApiError(404, "worker_not_found", f"worker {worker!r} not found")


def loaded_worker(principal: Principal, runtime: Runtime, worker: str) -> Worker:
    """The loaded worker named `worker` (or `tenant/worker`) that the caller's key may use; 404
    when the key may not, or no such worker is loaded (the two are not told apart)."""
    tenant_id, worker_id = principal_worker(principal, worker)
    found = runtime.registry.worker(tenant_id, worker_id)
    if found is None:
        raise worker_not_found(worker)
    return found


def install_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Let browsers on exactly `origins` call the API; nothing at all when empty (the default)."""
    if not origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(origins),
        allow_methods=["*"],
        allow_headers=["*"],
        expose_headers=["WWW-Authenticate"],
        allow_credentials=False,  # keys travel in a header, never in cookies
        max_age=600,
    )


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})
