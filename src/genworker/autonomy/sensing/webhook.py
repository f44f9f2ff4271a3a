"""The webhook sensor's core, free of HTTP: pick the sensor, check a signature, turn a body into facts.

A signed request carries `X-Genworker-Timestamp: <unix seconds>` and
`X-Genworker-Signature: sha256=<hex>`, the HMAC-SHA256 of `<timestamp>.<raw body>` under the secret
held by the environment variable the sensor's `filter.secret_env` names. The timestamp is inside the
signed bytes, so an old request cannot be replayed with a fresh one; it must be within 5 minutes.

Each JSON object of the body (one, or a list of at most MAX_ITEMS) becomes one `webhook.fact`. Its
dedupe key is the object's `id`, else the `Idempotency-Key` header (`<key>:<index>` in a list), else
for a signed request the digest of the signed bytes (a replay is dropped), else none: unkeyed
requests retried by the sender are written twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from genworker.autonomy.sensing.facts import Emission, Fact, FactEmitter
from genworker.autonomy.sensing.filters import WebhookFilter, parse_filter
from genworker.workspace.models.persona import SensorConfig
from genworker.workspace.snapshot import Worker

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_ITEMS",
    "SIGNATURE_HEADER",
    "SIGNATURE_TOLERANCE_S",
    "TIMESTAMP_HEADER",
    "WebhookError",
    "body_facts",
    "check_timestamp",
    "ingest",
    "select_webhook_sensor",
    "sign",
    "signature_mismatch",
    "verify_signature",
    "webhook_secret_env",
]

MAX_BODY_BYTES = 1024 * 1024
MAX_ITEMS = 100
SIGNATURE_TOLERANCE_S = 300
SIGNATURE_HEADER = "X-Genworker-Signature"
TIMESTAMP_HEADER = "X-Genworker-Timestamp"
EVENT_TYPE = "webhook.fact"
_MAX_KEY_CHARS = 200


class WebhookError(Exception):
    """Why a webhook request is refused: an HTTP status, a stable code and a message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def select_webhook_sensor(worker: Worker, sensor_key: str | None = None) -> SensorConfig:
    """The worker's webhook sensor named `sensor_key`, or its only (or `webhook`-keyed) one."""
    hooks = [c for c in worker.persona.sensor_configs if c.source_type == "webhook"]
    if not hooks:
        raise WebhookError(404, "no_webhook_sensor", f"worker {worker.worker_id!r} has no webhook sensor")
    if sensor_key is not None:
        for config in hooks:
            if config.key == sensor_key:
                return config
        raise WebhookError(
            404, "no_webhook_sensor", f"worker {worker.worker_id!r} has no webhook sensor {sensor_key!r}"
        )
    if len(hooks) == 1:
        return hooks[0]
    for config in hooks:
        if config.key == "webhook":
            return config
    names = ", ".join(c.key for c in hooks)
    raise WebhookError(400, "sensor_required", f"worker has several webhook sensors ({names}): name one with ?sensor=")


def webhook_secret_env(config: SensorConfig) -> str | None:
    """The name of the environment variable holding the sensor's HMAC secret (None: key auth only)."""
    parsed = parse_filter(config)
    assert isinstance(parsed, WebhookFilter)
    return parsed.secret_env


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()


def check_timestamp(signature: str | None, timestamp: str | None, now: datetime) -> None:
    """The checks that need no secret (headers present, timestamp fresh); WebhookError 401 otherwise."""
    if not signature or not timestamp:
        raise _bad_signature(f"send {SIGNATURE_HEADER} and {TIMESTAMP_HEADER}")
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise _bad_signature(f"{TIMESTAMP_HEADER} must be unix seconds")
    if abs(now.timestamp() - int(timestamp)) > SIGNATURE_TOLERANCE_S:
        raise _bad_signature(f"{TIMESTAMP_HEADER} is more than {SIGNATURE_TOLERANCE_S // 60} minutes off")


def verify_signature(secret: bytes, body: bytes, signature: str | None, timestamp: str | None, now: datetime) -> str:
    """Check a signed request; returns the digest of the signed bytes. WebhookError 401 otherwise."""
    check_timestamp(signature, timestamp, now)
    assert signature is not None and timestamp is not None
    expected = sign(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode("ascii"), signature.strip().encode("utf-8", "replace")):
        raise signature_mismatch()
    return hashlib.sha256(timestamp.encode("ascii") + b"." + body).hexdigest()


def signature_mismatch() -> WebhookError:
    """The one answer for a wrong signature, and for anything an anonymous caller must not tell apart."""
    return _bad_signature("signature does not match")


def _bad_signature(why: str) -> WebhookError:
    return WebhookError(401, "invalid_signature", f"invalid webhook signature: {why}")


def body_facts(body: bytes, idempotency_key: str | None = None, signed_digest: str | None = None) -> list[Fact]:
    """The facts of a request body; WebhookError 400 / 413 when it is not one or a list of JSON objects."""
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WebhookError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    batch = isinstance(data, list)
    items: Sequence[Any] = data if isinstance(data, list) else [data]
    if not items:
        raise WebhookError(400, "invalid_body", "the body is an empty list")
    if len(items) > MAX_ITEMS:
        raise WebhookError(413, "too_many_items", f"at most {MAX_ITEMS} objects per request, got {len(items)}")
    if idempotency_key is not None and not _valid_key(idempotency_key):
        raise WebhookError(
            400, "invalid_idempotency_key", f"Idempotency-Key must be 1-{_MAX_KEY_CHARS} printable ASCII"
        )
    facts = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            where = f"item {index}" if batch else "the body"
            raise WebhookError(400, "invalid_body", f"{where} must be a JSON object")
        facts.append(Fact(EVENT_TYPE, item, _key(item, index if batch else None, idempotency_key, signed_digest)))
    return facts


def _valid_key(key: str) -> bool:
    return 0 < len(key) <= _MAX_KEY_CHARS and key.isascii() and key.isprintable()


def _key(item: Mapping[str, Any], index: int | None, idempotency_key: str | None, digest: str | None) -> str:
    own = item.get("id")
    if isinstance(own, str | int) and not isinstance(own, bool) and _valid_key(str(own)):
        return f"id:{own}"
    suffix = "" if index is None else f":{index}"
    if idempotency_key is not None:
        return f"idem:{idempotency_key}{suffix}"
    if digest is not None:
        return f"sig:{digest}{suffix}"
    return f"auto:{uuid.uuid4().hex}"


async def ingest(emitter: FactEmitter, facts: Sequence[Fact]) -> list[Emission]:
    """Write the facts in order; returns once every one is durably in the inbox (or a duplicate)."""
    return [await emitter.emit(fact) for fact in facts]
