"""The API's one error format: `{"error": {"code": ..., "message": ...}}`, and its OpenAPI model.

`install_error_handlers` maps HTTPException (including the router's own 404 and 405, whose `Allow`
lists the methods the OpenAPI document gives the path), request validation errors, an invalid id and
`ApiError` to that shape, and turns any unhandled exception into a 500 `internal_error` carrying only
an error id; the traceback goes to the log. Routes declare the errors they answer with
`error_responses(...)`.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from genworker.api.params import path_rule
from genworker.ids import InvalidIdError
from genworker.observability.logging import internal_error_message, log_internal_error

__all__ = ["ApiError", "ErrorBody", "error_response", "error_responses", "install_error_handlers"]

log = logging.getLogger("genworker.api")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    410: "gone",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    501: "not_implemented",
    502: "bad_gateway",
    503: "unavailable",
    504: "timeout",
}


_MEANINGS = {
    400: "a malformed request (a header or body the route cannot read)",
    401: "no API key, or an invalid or revoked one",
    403: "the key (or the caller) may not do this",
    404: "no such worker for this key (or it is another tenant's), or no such item",
    405: "the method is not allowed here",
    409: "the item's state does not allow this (already decided, finished, or a conflicting edit)",
    413: "the body is too large",
    415: "an unsupported Content-Type",
    422: "a parameter, header or body field is invalid: `fields` names each (`loc`, `message`, `type`)",
    429: "too many requests (`rate_limited`), or a service worker is full (`service_busy`): retry after `Retry-After`",
    500: "an internal error: the message carries an error id the log has the traceback for",
    502: "the run failed upstream (the model provider)",
    503: "the component this needs is not configured or not available on this server",
}


class FieldError(BaseModel):
    loc: list[str]
    message: str
    type: str


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")
    code: str = Field(description="stable, machine-readable", examples=["worker_not_found"])
    message: str = Field(description="for people: names the field, file or header at fault")
    fields: list[FieldError] | None = Field(None, description="422 validation errors only")
    error_id: str | None = Field(None, description="500 only: quote it when reporting the error")


class ErrorBody(BaseModel):
    """Every error answer of the API."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, each with the error model."""
    return {status: {"model": ErrorBody, "description": _MEANINGS[status]} for status in statuses}


class ApiError(Exception):
    """Raise from a route or dependency to answer `status` with a stable error `code`."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(InvalidIdError, _invalid_id)  # type: ignore[arg-type]
    app.add_middleware(_CatchUnhandled)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    headers = exc.headers
    if exc.status == 405 and "Allow" not in headers:
        headers = {**headers, "Allow": _allowed_methods(request)}
    return error_response(exc.status, exc.code, exc.message, headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    default = "client_error" if exc.status_code < 500 else "server_error"
    code = _CODES.get(exc.status_code, default)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = exc.headers
    if exc.status_code == 405:  # the router's names the methods of the first route on the path only
        headers = {**(headers or {}), "Allow": _allowed_methods(request, (headers or {}).get("Allow"))}
    return error_response(exc.status_code, code, message, headers)


def _allowed_methods(request: Request, given: str | None = None) -> str:
    """The methods the OpenAPI document gives this path, from its most literal template (`/briefs/generate`
    rather than `/briefs/{brief_id}`); the router's own when the document has none."""
    path = request.scope.get("path", "")
    matching = [
        (literal, methods) for pattern, literal, methods in _documented_paths(request.app) if pattern.fullmatch(path)
    ]
    if matching:
        most = max(literal for literal, _ in matching)
        methods = set().union(*(m for literal, m in matching if literal == most))
    else:
        methods = {m.strip().upper() for m in (given or "").split(",") if m.strip()}
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods))


# per app, made on first use (once every route is included)
_DOCUMENTED: weakref.WeakKeyDictionary[Any, list[tuple[re.Pattern[str], int, frozenset[str]]]] = (
    weakref.WeakKeyDictionary()
)


def _documented_paths(app: Any) -> list[tuple[re.Pattern[str], int, frozenset[str]]]:
    """(path pattern, its number of literal segments, methods) of each path of the OpenAPI document."""
    found = _DOCUMENTED.get(app)
    if found is None:
        found = [
            (
                re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path))),
                sum(1 for part in path.split("/") if part and not part.startswith("{")),
                frozenset(m.upper() for m in ops),
            )
            for path, ops in app.openapi().get("paths", {}).items()
        ]
        _DOCUMENTED[app] = found
    return found


async def _invalid_id(request: Request, exc: InvalidIdError) -> JSONResponse:
    """An id a route passed on unchecked (the path's are checked by their parameter types)."""
    return error_response(422, "invalid_id", str(exc))


def _field_message(error: Mapping[str, Any]) -> str:
    loc = error.get("loc", ())
    if len(loc) == 2 and loc[0] == "path" and str(error.get("type", "")).startswith("string_"):
        rule = path_rule(str(loc[1]))
        if rule is not None:
            return f"{rule}, got {error.get('input')!r}"[:300]  # the rule rather than its pattern
    return str(error.get("msg", ""))


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    # loc, msg and type only: `input` may echo a secret from the body
    fields = [
        {"loc": [str(part) for part in e.get("loc", ())], "message": _field_message(e), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    where = ", ".join(f"{'.'.join(f['loc'])}: {f['message']}" for f in fields[:3])
    more = f" (and {len(fields) - 3} more)" if len(fields) > 3 else ""
    return error_response(422, "validation_error", f"invalid request: {where}{more}", fields=fields)


class _CatchUnhandled:
    """Innermost user middleware: an unhandled exception becomes a 500 with an error id.

    Unlike an `Exception` handler (which Starlette re-raises to the server after replying),
    this logs the traceback once, tagged with the id the client saw.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            where = f"[API] unhandled error on {scope.get('method')} {scope.get('path')}"
            error_id = log_internal_error(log, where, exc)
            if started:
                raise
            message = internal_error_message(error_id)
            await error_response(500, "internal_error", message, error_id=error_id)(scope, receive, send)
