"""The OpenAPI document, made to say what the server does: what follows from how a route is built is
added here, once, so it cannot drift from the code.

- every operation can answer 500 `internal_error` (api/errors.py), and one that takes a body 400 when
  the body is not UTF-8 JSON;
- an operation that takes a tenant API key (its security, declared by `require_principal`) answers
  401 without one, and, when it changes state, 403 for a dashboard session without its CSRF header;
- every 422 (FastAPI's own validation answer included) is the API's error model, not FastAPI's;
- every 429 carries `Retry-After` (whole seconds), as api/ratelimit.py and ServiceBusy send it.

Errors particular to a route (404 unknown item, 409, 429, 503 ...) are declared on the route with
`error_responses` (api/errors.py); tests/structural/test_api_statuses.py checks that each status a
route's code can answer is declared.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI

from genworker.api.auth import API_KEY_SCHEME
from genworker.api.errors import ErrorBody, error_responses

__all__ = ["install_openapi"]

_SAFE_METHODS: Final = frozenset({"get", "head", "options"})
_REF: Final = "#/components/schemas/{model}"
_RETRY_AFTER: Final = {
    "Retry-After": {
        "description": "whole seconds to wait before trying again",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}


def install_openapi(app: FastAPI) -> None:
    """Serve `/openapi.json` as FastAPI builds it, completed as the module docstring says."""
    build = app.openapi
    done = False

    def openapi() -> dict[str, Any]:
        nonlocal done
        schema = build()
        if not done:
            _complete(schema)
            done = True
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(schema: dict[str, Any]) -> None:
    models = schema.setdefault("components", {}).setdefault("schemas", {})
    body = ErrorBody.model_json_schema(ref_template=_REF, mode="serialization")
    models.update(body.pop("$defs", {}))
    models["ErrorBody"] = body
    for name in ("HTTPValidationError", "ValidationError"):
        models.pop(name, None)
    for operations in schema.get("paths", {}).values():
        for method, operation in operations.items():
            statuses = [500, 400] if "requestBody" in operation else [500]
            if any(API_KEY_SCHEME in requirement for requirement in operation.get("security", ())):
                statuses += [401] if method in _SAFE_METHODS else [401, 403]
            responses = operation.setdefault("responses", {})
            if "422" in responses:
                statuses.append(422)
            if "429" in responses:
                responses["429"]["headers"] = {**responses["429"].get("headers", {}), **_RETRY_AFTER}
            for status, declared in error_responses(*statuses).items():
                own = responses.get(str(status), {}).get("description")  # a route's own words stay
                responses[str(status)] = {
                    "description": own if own and own != "Validation Error" else declared["description"],
                    "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorBody")}}},
                }
