"""The webhook core: signatures (good, bad, stale), body parsing and dedupe keys, sensor selection."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from genworker.autonomy.sensing.webhook import (
    MAX_ITEMS,
    WebhookError,
    body_facts,
    select_webhook_sensor,
    sign,
    verify_signature,
)
from genworker.workspace.models import PersonaSpec
from genworker.workspace.snapshot import Worker

SECRET = b"0123456789abcdef-secret"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
TS = str(int(NOW.timestamp()))
BODY = b'{"event": "deploy"}'


def refused(body: bytes, signature: str | None, timestamp: str | None, now: datetime = NOW) -> str:
    with pytest.raises(WebhookError) as caught:
        verify_signature(SECRET, body, signature, timestamp, now)
    assert caught.value.status == 401 and caught.value.code == "invalid_signature"
    return caught.value.message


def test_a_good_signature_verifies_and_returns_a_stable_digest() -> None:
    digest = verify_signature(SECRET, BODY, sign(SECRET, TS, BODY), TS, NOW)
    assert digest == verify_signature(SECRET, BODY, sign(SECRET, TS, BODY), TS, NOW + timedelta(seconds=299))
    assert sign(SECRET, TS, BODY).startswith("sha256=")


def test_bad_signatures_are_refused() -> None:
    good = sign(SECRET, TS, BODY)
    assert "does not match" in refused(BODY + b" ", good, TS)  # body changed
    assert "does not match" in refused(BODY, sign(b"another-secret-value", TS, BODY), TS)
    assert "does not match" in refused(BODY, good.replace("sha256=", "sha1="), TS)
    assert "does not match" in refused(BODY, good, str(int(TS) + 1))  # the timestamp is signed too
    assert "send X-Genworker-Signature" in refused(BODY, None, TS)
    assert "send X-Genworker-Signature" in refused(BODY, good, None)
    assert "unix seconds" in refused(BODY, good, "yesterday")


def test_stale_or_future_timestamps_are_refused() -> None:
    for skew in (timedelta(minutes=6), -timedelta(minutes=6)):
        assert "5 minutes" in refused(BODY, sign(SECRET, TS, BODY), TS, NOW + skew)


def test_body_facts_keys() -> None:
    [one] = body_facts(b'{"x": 1}', "order-7")
    assert one.event_type == "webhook.fact" and dict(one.payload) == {"x": 1} and one.key == "idem:order-7"
    many = body_facts(json.dumps([{"x": 1}, {"id": "evt_9", "x": 2}]).encode(), "batch-1")
    assert [f.key for f in many] == ["idem:batch-1:0", "id:evt_9"]  # an object's own id wins
    [signed] = body_facts(b'{"x": 1}', None, "d1g3st")
    assert signed.key == "sig:d1g3st"
    a, b = body_facts(b'{"x": 1}'), body_facts(b'{"x": 1}')
    assert a[0].key != b[0].key and a[0].key.startswith("auto:")  # unkeyed: never deduped


@pytest.mark.parametrize(
    ("body", "key", "status", "code"),
    [
        (b"{nope", None, 400, "invalid_json"),
        (b"\xff\xfe", None, 400, "invalid_json"),
        (b"[]", None, 400, "invalid_body"),
        (b"42", None, 400, "invalid_body"),
        (b'[{"a": 1}, "b"]', None, 400, "invalid_body"),
        (json.dumps([{}] * (MAX_ITEMS + 1)).encode(), None, 413, "too_many_items"),
        (b"{}", "x" * 201, 400, "invalid_idempotency_key"),
        (b"{}", "caf\u00e9", 400, "invalid_idempotency_key"),
    ],
)
def test_bad_bodies(body: bytes, key: str | None, status: int, code: str) -> None:
    with pytest.raises(WebhookError) as caught:
        body_facts(body, key)
    assert (caught.value.status, caught.value.code) == (status, code)


def worker(*sensors: dict[str, Any]) -> Worker:
    persona = PersonaSpec.model_validate({"identity": {"name": "W", "worker_id": "w"}, "sensor_configs": sensors})
    return Worker("acme", "w", persona, "", {}, {}, {}, (), {}, None, {})


def test_select_webhook_sensor() -> None:
    assert select_webhook_sensor(worker({"source_type": "webhook"})).key == "webhook"
    two = worker({"source_type": "webhook"}, {"source_type": "webhook", "sensor_id": "ci"})
    assert select_webhook_sensor(two).key == "webhook"
    assert select_webhook_sensor(two, "ci").key == "ci"
    ambiguous = worker({"source_type": "webhook", "sensor_id": "a"}, {"source_type": "webhook", "sensor_id": "b"})
    for target, sensor, code in [
        (ambiguous, None, "sensor_required"),
        (ambiguous, "zzz", "no_webhook_sensor"),
        (worker({"source_type": "git", "filter": {"repo": "r"}}), None, "no_webhook_sensor"),
    ]:
        with pytest.raises(WebhookError) as caught:
            select_webhook_sensor(target, sensor)
        assert caught.value.code == code
