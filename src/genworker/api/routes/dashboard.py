"""The dashboard: the page and its assets, log in / log out with an API key, the session, the JSON
aggregator `GET /api/v1/workers/{w}/dashboard` and the console's pages (overview, workspace health,
usage, run view), tenant-scoped like every API route: the tenant is always the key's."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from genworker.api.auth import get_api_keys, principal_worker, require_principal, worker_not_found
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import RunId, SuggestionId, WorkerId
from genworker.auth import Principal
from genworker.dashboard import BlockContext, DashboardAggregator, static_dir
from genworker.dashboard.aggregator import BlockUnavailable
from genworker.dashboard.blocks_work import router_of
from genworker.dashboard.console import health, overview, visible_workers
from genworker.dashboard.run_view import run_detail
from genworker.dashboard.session import COOKIE, current_session, key_principal, signer_for
from genworker.dashboard.usage import MAX_DAYS, usage, window_runs
from genworker.runtime.composition import Runtime
from genworker.worker.lifecycle import RunNotFound, TaskLifecycleError
from genworker.worker.task import RunRef

__all__ = ["router"]

router = APIRouter(tags=["dashboard"])

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]

_ASSETS = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "channels.js": "text/javascript; charset=utf-8",
    "editor.js": "text/javascript; charset=utf-8",
    "playground.js": "text/javascript; charset=utf-8",
    "runview.js": "text/javascript; charset=utf-8",
    "runview.css": "text/css; charset=utf-8",
    "pages.js": "text/javascript; charset=utf-8",
    "experiments.js": "text/javascript; charset=utf-8",
}
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_MAX_LOGIN_BODY = 4096


def aggregator_of(request: Request) -> DashboardAggregator:
    found: DashboardAggregator = request.app.state.dashboard  # set by the app factory
    return found


@router.get("/dashboard", include_in_schema=False)
async def page() -> HTMLResponse:
    html = static_dir().joinpath("index.html").read_text(encoding="utf-8")
    return HTMLResponse(html, headers=_PAGE_HEADERS)


@router.get("/dashboard/static/{name}", include_in_schema=False)
async def asset(name: str) -> Response:
    if name not in _ASSETS:
        raise ApiError(404, "not_found", f"no dashboard asset {name!r}")
    body = static_dir().joinpath(name).read_bytes()
    return Response(body, media_type=_ASSETS[name], headers={"X-Content-Type-Options": "nosniff"})


def _same_origin(request: Request) -> None:
    """Log in / log out only from a page of this server (a browser always sends Origin on POST)."""
    origin = request.headers.get("origin")
    if origin is None:  # not a browser (curl, scripts): nothing to forge
        return
    if origin == "null" or urlsplit(origin).netloc != request.headers.get("host", ""):
        raise ApiError(403, "cross_origin", f"Origin {origin!r} may not log in to this dashboard")


async def _login_key(request: Request) -> tuple[str, bool]:
    """(api_key, sent by a plain HTML form) from a JSON or form-encoded body."""
    body = await request.body()
    if len(body) > _MAX_LOGIN_BODY:
        raise ApiError(413, "payload_too_large", "the login body is too large")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            data = json.loads(body)
        except ValueError:
            raise ApiError(400, "bad_request", "the login body is not JSON") from None
        key = data.get("api_key") if isinstance(data, dict) else None
        form = False
    elif content_type == "application/x-www-form-urlencoded":
        key = next(iter(parse_qs(body.decode("utf-8", "replace")).get("api_key", [])), None)
        form = True
    else:
        raise ApiError(415, "unsupported_media_type", "send api_key as JSON or as a form field")
    if not isinstance(key, str) or not key.strip():
        raise ApiError(422, "validation_error", "field 'api_key' is required")
    return key.strip(), form


@router.post("/dashboard/login", include_in_schema=False)
async def login(request: Request) -> Response:
    _same_origin(request)
    key, form = await _login_key(request)
    keys = get_api_keys(request)
    principal = await asyncio.to_thread(keys.verify, key)
    if principal is None:
        if form:
            return RedirectResponse("/dashboard?login=failed", 303)
        raise ApiError(401, "unauthorized", "invalid or revoked API key")
    signer = await asyncio.to_thread(signer_for, keys.root, principal.tenant_id)
    if signer is None:  # the tenant folder went away since the key was checked
        raise ApiError(401, "unauthorized", f"tenant {principal.tenant_id!r} no longer exists")
    session = signer.issue(principal.key_id, principal.tenant_id)
    response: Response = (
        RedirectResponse("/dashboard", 303)
        if form
        else Response(
            json.dumps({"tenant_id": principal.tenant_id, "csrf_token": signer.csrf_token(session)}),
            media_type="application/json",
        )
    )
    response.set_cookie(
        COOKIE,
        session.cookie,
        max_age=signer.ttl_s,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    response.headers["Cache-Control"] = "no-store"
    return response


@router.post("/dashboard/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    _same_origin(request)
    found = await asyncio.to_thread(current_session, request, get_api_keys(request).root)
    if found is not None:
        signer, session = found
        await asyncio.to_thread(signer.end, session)
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return response


@router.get("/dashboard/session", include_in_schema=False)
async def session_info(request: Request, runtime: RuntimeDep) -> dict[str, Any]:
    """Who the cookie logs in as, the CSRF token for changes, and the workers it may see."""
    keys = get_api_keys(request)
    found = await asyncio.to_thread(current_session, request, keys.root)
    principal = await asyncio.to_thread(key_principal, keys, found[1].tenant_id, found[1].key_id) if found else None
    if found is None or principal is None:
        raise ApiError(401, "unauthorized", "not logged in: log in with an API key at /dashboard")
    signer, session = found
    state = runtime.registry.tenant(principal.tenant_id)
    workers = sorted(w for w in (state.workers if state else {}) if principal.can_use(w))
    default = state.tenant.default_worker if state else None
    return {
        "tenant_id": principal.tenant_id,
        "key_id": principal.key_id,
        "csrf_token": signer.csrf_token(session),
        "expires_at": session.expires,
        "workers": workers,
        "default_worker": default if default in workers else (workers[0] if workers else None),
        "refresh_s": 15,
    }


@router.get(
    "/api/v1/workers/{worker_id}/dashboard",
    summary="Every dashboard block of a worker in one call",
    responses=error_responses(404),
)
async def dashboard(worker_id: WorkerId, request: Request, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, name = principal_worker(principal, worker_id)
    worker = runtime.registry.worker(tenant_id, name)
    if worker is None:
        raise worker_not_found(worker_id)
    return await aggregator_of(request).collect(BlockContext(runtime, principal, worker))


@router.post(
    "/api/v1/workers/{worker_id}/dashboard/suggestions/{suggestion_id}/{decision}",
    summary="Approve or reject a suggestion (the IM commands' backend); 404 unknown, 409 already decided",
    responses=error_responses(404, 409, 503),
)
async def decide_suggestion(
    worker_id: WorkerId,
    suggestion_id: SuggestionId,
    decision: Literal["approve", "reject"],
    principal: Auth,
    runtime: RuntimeDep,
) -> dict[str, Any]:
    tenant_id, name = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, name) is None:
        raise worker_not_found(worker_id)
    try:
        result = await asyncio.to_thread(
            runtime.services.command_backend.decide_suggestion,
            tenant_id,
            name,
            suggestion_id,
            decision,
            f"key:{principal.key_id}",
        )
    except LookupError as exc:
        raise ApiError(404, "suggestion_not_found", str(exc)) from None
    except ValueError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return {"suggestion": result}


def _unavailable(exc: BlockUnavailable) -> ApiError:
    return ApiError(503, "dashboard_unavailable", str(exc))


@router.get(
    "/api/v1/dashboard/overview",
    summary="The key's tenant at a glance: workers, health, confirmations, spend",
    responses=error_responses(503),
)
async def tenant_overview(principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    try:
        return await overview(runtime, principal, datetime.now(UTC))
    except BlockUnavailable as exc:
        raise _unavailable(exc) from None


@router.get("/api/v1/dashboard/health", summary="Every load error and warning of the key's tenant, per file and line")
async def workspace_health(principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    return await asyncio.to_thread(health, runtime, principal)


@router.get(
    "/api/v1/dashboard/usage",
    summary="Runs, failures, tokens and cost per day and tier, latency percentiles (the key's tenant)",
    responses=error_responses(404, 503),
)
async def tenant_usage(
    principal: Auth,
    runtime: RuntimeDep,
    worker_id: Annotated[
        str | None, Query(max_length=200, description="one worker; all the key may use when absent")
    ] = None,
    days: Annotated[int, Query(ge=1, le=MAX_DAYS)] = 14,
) -> dict[str, Any]:
    if worker_id is not None:
        tenant_id, name = principal_worker(principal, worker_id)
        if runtime.registry.worker(tenant_id, name) is None:
            raise worker_not_found(worker_id)
        names = [name]
    else:
        names = visible_workers(runtime, principal)
    now = datetime.now(UTC)
    since = datetime.combine(now.date() - timedelta(days=days - 1), datetime.min.time(), UTC)
    try:
        runs = await window_runs(runtime, principal.tenant_id, names, since)
    except BlockUnavailable as exc:
        raise _unavailable(exc) from None
    return {"tenant_id": principal.tenant_id, "workers": names, **usage(runs, days=days, now=now)}


@router.get(
    "/api/v1/workers/{worker_id}/dashboard/runs/{run_id}",
    summary="The run view: provenance, governance, model and tool calls, deliverables, errors with the reason",
    responses=error_responses(404, 500, 503),
)
async def run_view(worker_id: WorkerId, run_id: RunId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, name = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, name) is None:
        raise worker_not_found(worker_id)
    try:
        run = await router_of(runtime).tasks.get_run(RunRef(tenant_id, name, run_id))
    except BlockUnavailable as exc:
        raise _unavailable(exc) from None
    except (RunNotFound, ValueError):
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {worker_id!r}") from None
    except TaskLifecycleError as exc:
        raise ApiError(500, "run_unreadable", str(exc)) from None
    return await run_detail(runtime, run)
