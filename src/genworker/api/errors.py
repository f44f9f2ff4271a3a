"""The API's one error format: `{"error": {"code": ..., "message": ...}}`.

`install_error_handlers` maps HTTPException (including Starlette's own 404 and 405),
request validation errors and `ApiError` to that shape, and turns any unhandled exception
into a 500 `internal_error` carrying only an error id; the traceback goes to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from genworker.observability.logging import internal_error_message, log_internal_error

__all__ = ["ApiError", "error_response", "install_error_handlers"]

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
    app.add_middleware(_CatchUnhandled)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    default = "client_error" if exc.status_code < 500 else "server_error"
    code = _CODES.get(exc.status_code, default)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return error_response(exc.status_code, code, message, exc.headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    # loc, msg and type only: `input` may echo a secret from the body
    fields = [
        {"loc": [str(part) for part in e.get("loc", ())], "message": str(e.get("msg", "")), "type": e.get("type", "")}
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
