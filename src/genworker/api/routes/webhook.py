"""POST /api/v1/webhook/ingest/...: facts pushed by other systems into a worker's inbox.

- `/ingest/{worker_id}` with the tenant's API key (`Authorization: Bearer ...`); the tenant is the key's.
- `/ingest/{tenant_id}/{worker_id}` with a key of that tenant, or signed with the webhook sensor's
  HMAC secret (`X-Genworker-Signature`, `X-Genworker-Timestamp`; see sensing/webhook.py).

An anonymous caller learns nothing: for a signed request, an unknown worker, a worker without a
webhook sensor, a sensor without a secret and a wrong signature are all the same 401 "signature does
not match" (the log says which); only a missing header or a stale timestamp, checked first, is
named. The answer, 202 with the item ids, comes only once every fact is durably in the inbox.

Both routes take the bare `Request` and answer a ready `JSONResponse`, and `_RawRoute` calls them
directly: no dependency solving and no response model on this hot path (the body is parsed once, by
`body_facts`). The parameters, the body and the `IngestResponse` schema are documented in OpenAPI as
if they were declared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel

from genworker.api.auth import API_KEY_SCHEME, principal_worker, require_principal, worker_not_found
from genworker.api.deps import runtime_of
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import ID_MAX_LENGTH, ID_RULE, ID_SCHEMA_PATTERN
from genworker.autonomy.sensing.base import utc_now
from genworker.autonomy.sensing.errors import SensorConfigError
from genworker.autonomy.sensing.facts import Emission, FactEmitter
from genworker.autonomy.sensing.webhook import (
    MAX_BODY_BYTES,
    MAX_ITEMS,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    WebhookError,
    body_facts,
    check_timestamp,
    ingest,
    select_webhook_sensor,
    signature_mismatch,
    verify_signature,
    webhook_secret_env,
)
from genworker.ids import InvalidIdError, validate_id
from genworker.observability.metrics import record_webhook_verification_failure
from genworker.runtime.composition import Runtime
from genworker.workspace.models.persona import SensorConfig

__all__ = ["IngestResponse", "IngestedItem", "router"]

log = logging.getLogger("genworker.api.webhook")


class _RawRoute(APIRoute):
    """A route whose endpoint takes the `Request` alone and returns a `Response`: it is called as it is,
    without FastAPI's per-request dependency solving and response serialisation."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Coroutine[Any, Any, Response]] = self.endpoint
        return endpoint


router = APIRouter(prefix="/api/v1/webhook", tags=["webhook"], route_class=_RawRoute)

MIN_SECRET_CHARS = 16


def _param(name: str, where: str, schema: dict[str, Any], *, required: bool) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": schema}


def _id(title: str) -> dict[str, Any]:
    return {"type": "string", "title": title, "pattern": ID_SCHEMA_PATTERN, "maxLength": ID_MAX_LENGTH}


_PATH_WORKER = {**_param("worker_id", "path", _id("Worker Id"), required=True), "description": ID_RULE}
_PATH_TENANT = {**_param("tenant_id", "path", _id("Tenant Id"), required=True), "description": ID_RULE}
# webhook._valid_key: 1-200 printable ASCII; a header value does not begin or end with a space
_IDEMPOTENCY_KEY = {
    **_param(
        "Idempotency-Key",
        "header",
        {"type": "string", "pattern": r"^[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?$"},
        required=False,
    ),
    "description": "1-200 printable ASCII characters: a retry with the same key is not stored twice",
}
_QUERY_SENSOR = _param(
    "sensor", "query", {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Sensor"}, required=False
)

_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"type": "object"},
                        {"type": "array", "items": {"type": "object"}, "minItems": 1, "maxItems": MAX_ITEMS},
                    ]
                },
                "example": {"id": "evt_1042", "event": "build.failed", "repo": "acme/app", "branch": "main"},
            }
        },
    },
    "parameters": [_IDEMPOTENCY_KEY],
}


class IngestedItem(BaseModel):
    item_id: str | None  # None: a duplicate, already in the inbox under its dedupe_key
    dedupe_key: str | None
    route: str | None
    duplicate: bool
    goal_proposal_id: str | None = None


class IngestResponse(BaseModel):
    tenant_id: str
    worker_id: str
    sensor: str
    accepted: int
    duplicates: int
    items: list[IngestedItem]


_KEYED_DOC: dict[str, Any] = {
    **_BODY_DOC,
    "parameters": [_PATH_WORKER, _QUERY_SENSOR, *_BODY_DOC["parameters"]],
    "security": [{API_KEY_SCHEME: []}],
}

_SIGNED_DOC: dict[str, Any] = {
    **_BODY_DOC,
    "parameters": [
        _PATH_TENANT,
        _PATH_WORKER,
        _QUERY_SENSOR,
        *_BODY_DOC["parameters"],
        _param(SIGNATURE_HEADER, "header", {"type": "string"}, required=False),
        _param(TIMESTAMP_HEADER, "header", {"type": "string"}, required=False),
    ],
}


@router.post(
    "/ingest/{worker_id}",
    status_code=202,
    response_model=IngestResponse,
    openapi_extra=_KEYED_DOC,
    responses=error_responses(400, 401, 403, 404, 413, 503),
)
async def ingest_with_key(request: Request) -> JSONResponse:
    principal = await require_principal(request)
    tenant_id, worker_id = principal_worker(principal, request.path_params["worker_id"])
    return await _keyed(request, tenant_id, worker_id, request.query_params.get("sensor"))


@router.post(
    "/ingest/{tenant_id}/{worker_id}",
    status_code=202,
    response_model=IngestResponse,
    openapi_extra=_SIGNED_DOC,
    responses=error_responses(400, 401, 404, 413, 503),
)
async def ingest_signed(request: Request) -> JSONResponse:
    tenant_id, worker_id = request.path_params["tenant_id"], request.path_params["worker_id"]
    sensor = request.query_params.get("sensor")
    if request.headers.get("authorization"):
        principal = await require_principal(request)
        tenant, worker = principal_worker(principal, f"{tenant_id}/{worker_id}")
        return await _keyed(request, tenant, worker, sensor)
    runtime = runtime_of(request)
    signature, timestamp = request.headers.get(SIGNATURE_HEADER), request.headers.get(TIMESTAMP_HEADER)
    try:
        check_timestamp(signature, timestamp, utc_now())  # needs no secret: tells nothing about the worker
        config, secret = _signed_sensor(runtime, tenant_id, worker_id, sensor)
        body = await _read_body(request)
        digest = verify_signature(secret, body, signature, timestamp, utc_now())
    except WebhookError as exc:
        if exc.status == 401:
            record_webhook_verification_failure("webhook", exc.code)
        raise ApiError(exc.status, exc.code, exc.message) from None
    return await _write(runtime, tenant_id, worker_id, config, body, request, digest)


async def _keyed(request: Request, tenant_id: str, worker_id: str, sensor: str | None) -> JSONResponse:
    runtime = runtime_of(request)
    worker = runtime.registry.worker(tenant_id, worker_id)
    if worker is None:
        raise worker_not_found(worker_id)
    try:
        config = select_webhook_sensor(worker, sensor)
    except WebhookError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    body = await _read_body(request)
    return await _write(runtime, tenant_id, worker_id, config, body, request, None)


def _signed_sensor(runtime: Runtime, tenant_id: str, worker_id: str, sensor: str | None) -> tuple[SensorConfig, bytes]:
    """The sensor and its secret for a signed request; every failure is the wrong-signature 401."""
    refused = signature_mismatch()
    try:
        validate_id(tenant_id)
        validate_id(worker_id)
    except InvalidIdError:
        raise refused from None
    worker = runtime.registry.worker(tenant_id, worker_id)
    if worker is None:
        log.info("[Webhook] signed request for unknown worker %s/%s refused", tenant_id, worker_id)
        raise refused
    try:
        config = select_webhook_sensor(worker, sensor)
        env = webhook_secret_env(config)
    except (WebhookError, SensorConfigError) as exc:
        log.info("[Webhook] signed request for %s/%s refused: %s", tenant_id, worker_id, exc)
        raise refused from None
    secret = runtime.settings.get(env) if env else None
    if not secret or len(secret) < MIN_SECRET_CHARS:
        why = f"{env} is unset or shorter than {MIN_SECRET_CHARS} characters" if env else "no filter.secret_env"
        log.warning("[Webhook] signed request for %s/%s/%s refused: %s", tenant_id, worker_id, config.key, why)
        raise refused
    return config, secret.encode("utf-8")


async def _read_body(request: Request) -> bytes:
    too_large = ApiError(413, "payload_too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _write(
    runtime: Runtime,
    tenant_id: str,
    worker_id: str,
    config: SensorConfig,
    body: bytes,
    request: Request,
    digest: str | None,
) -> JSONResponse:
    try:
        facts = body_facts(body, request.headers.get("idempotency-key"), digest)
    except WebhookError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    writer = runtime.services.inbox
    try:
        emitter = FactEmitter(tenant_id, worker_id, config, writer)
    except SensorConfigError as exc:
        raise ApiError(503, "sensor_misconfigured", str(exc)) from None
    try:
        emissions = await ingest(emitter, facts)
    except Exception:
        log.exception("[Webhook] inbox write failed for %s/%s", tenant_id, worker_id)
        raise ApiError(
            503, "inbox_unavailable", "the inbox did not take the facts; retry with the same Idempotency-Key"
        ) from None
    items = [_item(e) for e in emissions]
    accepted = sum(1 for i in items if not i["duplicate"])
    answer = {  # an IngestResponse
        "tenant_id": tenant_id,
        "worker_id": worker_id,
        "sensor": config.key,
        "accepted": accepted,
        "duplicates": len(items) - accepted,
        "items": items,
    }
    return JSONResponse(answer, status_code=202)


def _item(emission: Emission) -> dict[str, Any]:
    """An IngestedItem."""
    item = emission.item
    assert item is not None  # webhook filters drop nothing
    proposal = emission.proposal.item_id if emission.proposal is not None and emission.proposal_written else None
    return {
        "item_id": item.item_id if emission.written else None,
        "dedupe_key": item.dedupe_key,
        "route": item.route,
        "duplicate": not emission.written,
        "goal_proposal_id": proposal,
    }
