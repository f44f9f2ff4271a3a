"""POST /api/v1/webhook/ingest/... on the real app: API key and HMAC paths, dedupe, durability, errors."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx2 import Response

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.sensing import GOAL_PROPOSED
from genworker.autonomy.sensing.testing import MemoryInboxWriter, write_worker
from genworker.autonomy.sensing.webhook import MAX_BODY_BYTES, MAX_ITEMS, sign
from genworker.settings import load_settings

SECRET = "test-fake-webhook-secret-0001"
HOOK = {
    "source_type": "webhook",
    "filter": {"secret_env": "WEBHOOK_SECRET_W"},
    "routing_rules": [{"field": "event", "pattern": "build.", "match": "prefix", "route": "task"}],
    "fallback_route": "summary",
    "auto_create_goal": True,
    "require_approval": True,
}


@dataclass
class Api:
    client: TestClient
    writer: MemoryInboxWriter
    key: str  # an API key of tenant acme
    other_key: str  # an API key of tenant globex

    def post(self, path: str, body: Any = None, *, key: str | None = None, **kwargs: Any) -> Response:
        headers = dict(kwargs.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if body is not None:
            kwargs["content"] = json.dumps(body).encode()
            headers.setdefault("Content-Type", "application/json")
        return self.client.post(f"/api/v1/webhook/ingest/{path}", headers=headers, **kwargs)

    def signed(self, path: str, raw: bytes, *, secret: str = SECRET, at: int | None = None, **headers: str) -> Response:
        timestamp = str(at if at is not None else int(time.time()))
        headers = {
            "X-Genworker-Timestamp": timestamp,
            "X-Genworker-Signature": sign(secret.encode(), timestamp, raw),
            "Content-Type": "application/json",
            **headers,
        }
        return self.client.post(f"/api/v1/webhook/ingest/{path}", content=raw, headers=headers)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    root = tmp_path / "ws"
    write_worker(root, [HOOK], worker_id="w")
    write_worker(root, [{"source_type": "webhook", "sensor_id": "unsigned"}], worker_id="keyonly")
    write_worker(root, [{"source_type": "git", "filter": {"repo": "r"}}], worker_id="nohook")
    two = [{"source_type": "webhook", "sensor_id": name} for name in ("alerts", "deploys")]
    write_worker(root, two, worker_id="two")
    write_worker(root, [{**HOOK, "filter": {"secret_env": "WEBHOOK_SECRET_UNSET"}}], tenant_id="globex", worker_id="g")
    (tmp_path / "configs").mkdir()
    environ = {"GENWORKER_HOT_RELOAD": "false", "WEBHOOK_SECRET_W": SECRET}
    app = create_app(load_settings(tmp_path / "configs", environ, workspace=root))
    writer = MemoryInboxWriter()
    keys = ApiKeyStore(root)
    with TestClient(app) as client:
        # the route writes through the inbox's `write`; the test's writer records and can fail
        monkeypatch.setattr(app.state.runtime.services.inbox, "write", writer.write)
        yield Api(client, writer, keys.create("acme")[1], keys.create("globex")[1])


def error(response: Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code, response.text
    return str(response.json()["error"]["message"])


def test_a_keyed_fact_is_durable_when_202_returns(api: Api) -> None:
    response = api.post("w", {"event": "build.failed", "repo": "acme/app"}, key=api.key)
    assert response.status_code == 202, response.text
    body = response.json()
    assert (body["tenant_id"], body["worker_id"], body["sensor"], body["accepted"]) == ("acme", "w", "webhook", 1)
    [entry] = body["items"]
    stored = api.writer.get(entry["item_id"])  # in the inbox by the time the client saw 202
    assert stored is not None and stored.event_type == "webhook.fact" and stored.route == "task"
    assert dict(stored.payload) == {"event": "build.failed", "repo": "acme/app"}
    assert (stored.tenant_id, stored.worker_id, stored.source_type) == ("acme", "w", "webhook")
    assert api.post("w", {"event": "ping"}, key=api.key).json()["items"][0]["route"] == "summary"


def test_idempotency_key_and_body_id_dedupe(api: Api) -> None:
    headers = {"Idempotency-Key": "order-42"}
    first = api.post("w", {"event": "paid"}, key=api.key, headers=headers).json()
    again = api.post("w", {"event": "paid"}, key=api.key, headers=headers).json()
    assert first["accepted"] == 1 and again["accepted"] == 0 and again["duplicates"] == 1
    assert again["items"][0] == {**first["items"][0], "item_id": None, "duplicate": True}
    batch = [{"id": "evt-1", "event": "a"}, {"event": "b"}]
    assert api.post("w", batch, key=api.key, headers={"Idempotency-Key": "b1"}).json()["accepted"] == 2
    retry = api.post("w", batch, key=api.key, headers={"Idempotency-Key": "b1"}).json()
    assert retry["duplicates"] == 2
    assert [i.dedupe_key for i in api.writer.items] == [
        "webhook:webhook:idem:order-42",
        "webhook:webhook:id:evt-1",
        "webhook:webhook:idem:b1:1",
    ]


def test_the_tenant_path_form_works_with_a_key_of_that_tenant(api: Api) -> None:
    assert api.post("acme/w", {"event": "x"}, key=api.key).status_code == 202
    error(api.post("acme/w", {"event": "x"}, key=api.other_key), 404, "worker_not_found")
    error(api.post("w", {"event": "x"}, key=api.other_key), 404, "worker_not_found")


def test_bad_requests(api: Api) -> None:
    error(api.post("w", {"x": 1}), 401, "unauthorized")
    error(api.post("nobody", {"x": 1}, key=api.key), 404, "worker_not_found")
    error(api.post("nohook", {"x": 1}, key=api.key), 404, "no_webhook_sensor")
    bad_json = api.client.post(
        "/api/v1/webhook/ingest/w", content=b"{oops", headers={"Authorization": f"Bearer {api.key}"}
    )
    error(bad_json, 400, "invalid_json")
    error(api.post("w", ["not an object"], key=api.key), 400, "invalid_body")
    error(api.post("w", [{"n": n} for n in range(MAX_ITEMS + 1)], key=api.key), 413, "too_many_items")
    huge = b'{"pad": "' + b"x" * MAX_BODY_BYTES + b'"}'
    headers = {"Authorization": f"Bearer {api.key}"}
    error(api.client.post("/api/v1/webhook/ingest/w", content=huge, headers=headers), 413, "payload_too_large")
    chunked = api.client.post("/api/v1/webhook/ingest/w", content=iter([huge[:1000], huge[1000:]]), headers=headers)
    error(chunked, 413, "payload_too_large")  # no Content-Length: the stream is cut at the cap
    assert api.writer.items == []


def test_the_sensor_query_picks_one_of_several_webhook_sensors(api: Api) -> None:
    assert "alerts, deploys" in error(api.post("two", {"x": 1}, key=api.key), 400, "sensor_required")
    for path in ("two?sensor=deploys", "acme/two?sensor=deploys"):
        answer = api.post(path, {"x": 1}, key=api.key)
        assert answer.status_code == 202, answer.text
        assert (answer.json()["worker_id"], answer.json()["sensor"]) == ("two", "deploys")
    assert "'nope'" in error(api.post("two?sensor=nope", {"x": 1}, key=api.key), 404, "no_webhook_sensor")
    assert [i.source_id for i in api.writer.items] == ["deploys", "deploys"]


def test_a_signed_request_is_accepted_and_a_replay_is_dropped(api: Api) -> None:
    raw = json.dumps({"event": "build.passed"}).encode()
    now = int(time.time())
    first = api.signed("acme/w", raw, at=now)
    assert first.status_code == 202, first.text
    assert first.json()["items"][0]["route"] == "task"
    replay = api.signed("acme/w", raw, at=now)
    assert replay.status_code == 202 and replay.json()["duplicates"] == 1
    assert api.signed("acme/w", raw, at=now + 1).json()["accepted"] == 1  # a new event, same body
    assert len(api.writer.items) == 2


def test_bad_signatures_are_one_indistinct_401(api: Api) -> None:
    raw = b'{"event": "x"}'
    for at in (int(time.time()) - 600, int(time.time()) + 600):  # stale or from the future: checked first
        assert "5 minutes off" in error(api.signed("acme/w", raw, at=at), 401, "invalid_signature")
        assert "5 minutes off" in error(api.signed("acme/nobody", raw, at=at), 401, "invalid_signature")
    messages = {
        "wrong secret": error(
            api.signed("acme/w", raw, secret="test-fake-other-secret-0002"), 401, "invalid_signature"
        ),
        "unknown worker": error(api.signed("acme/nobody", raw), 401, "invalid_signature"),
        "unknown tenant": error(api.signed("nope/w", raw), 401, "invalid_signature"),
        "no webhook sensor": error(api.signed("acme/nohook", raw), 401, "invalid_signature"),
        "no secret_env": error(api.signed("acme/keyonly", raw), 401, "invalid_signature"),
        "secret env unset": error(api.signed("globex/g", raw), 401, "invalid_signature"),
    }
    assert set(messages.values()) == {"invalid webhook signature: signature does not match"}, messages
    now = str(int(time.time()))
    tampered = api.client.post(
        "/api/v1/webhook/ingest/acme/w",
        content=b'{"event": "y"}',
        headers={"X-Genworker-Timestamp": now, "X-Genworker-Signature": sign(SECRET.encode(), now, raw)},
    )
    assert "does not match" in error(tampered, 401, "invalid_signature")
    unsigned = api.client.post("/api/v1/webhook/ingest/acme/w", content=raw)
    assert "send X-Genworker-Signature" in error(unsigned, 401, "invalid_signature")
    error(api.signed("w", raw), 401, "unauthorized")  # the short form takes only API keys
    assert api.writer.items == []


def test_a_goal_worthy_fact_gets_a_proposal_that_waits_for_approval(api: Api) -> None:
    body = api.post("w", {"event": "okr.set", "goal": "Cut build time in half"}, key=api.key).json()
    entry = body["items"][0]
    assert entry["goal_proposal_id"] is not None
    proposal = api.writer.get(entry["goal_proposal_id"])
    assert proposal is not None and proposal.event_type == GOAL_PROPOSED
    assert proposal.metadata["require_approval"] is True and proposal.payload["title"] == "Cut build time in half"
    assert proposal.payload["fact_dedupe_key"] == entry["dedupe_key"]


def test_an_inbox_failure_is_a_503_and_the_retry_lands_once(api: Api) -> None:
    api.writer.fail_next = 1
    headers = {"Idempotency-Key": "retry-me"}
    error(api.post("w", {"event": "x"}, key=api.key, headers=headers), 503, "inbox_unavailable")
    assert api.post("w", {"event": "x"}, key=api.key, headers=headers).json()["accepted"] == 1
    assert len(api.writer.items) == 1


def test_openapi_documents_both_forms(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    for path in ("/api/v1/webhook/ingest/{worker_id}", "/api/v1/webhook/ingest/{tenant_id}/{worker_id}"):
        operation = paths[path]["post"]
        assert "example" in operation["requestBody"]["content"]["application/json"]
        assert operation["responses"]["202"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/IngestResponse"
        }
    keyed = paths["/api/v1/webhook/ingest/{worker_id}"]["post"]
    assert {(p["name"], p["in"], p["required"]) for p in keyed["parameters"]} == {
        ("worker_id", "path", True),
        ("sensor", "query", False),
        ("Idempotency-Key", "header", False),
    }
    signed = paths["/api/v1/webhook/ingest/{tenant_id}/{worker_id}"]["post"]
    assert {"tenant_id", "worker_id", "sensor", "X-Genworker-Signature"} <= {p["name"] for p in signed["parameters"]}


def test_200_concurrent_posts_land_as_200_items_and_a_revoked_key_is_refused_next(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write_worker(root, [{"source_type": "webhook", "sensor_id": "hooks"}], worker_id="w")
    (tmp_path / "configs").mkdir()
    app = create_app(load_settings(tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=root))
    keys = ApiKeyStore(root)
    key_id, key = keys.create("acme")
    with TestClient(app) as client:
        headers = {"Authorization": f"Bearer {key}"}

        def post(n: int) -> dict[str, Any]:
            body = {"id": f"evt-{n % 200}", "n": n}  # 250 posts: 50 resend an earlier id
            response = client.post("/api/v1/webhook/ingest/w", json=body, headers=headers)
            assert response.status_code == 202, response.text
            return dict(response.json())

        with ThreadPoolExecutor(max_workers=16) as pool:
            answers = list(pool.map(post, range(250)))
        assert sum(a["accepted"] for a in answers) == 200 and sum(a["duplicates"] for a in answers) == 50
        listed = client.get("/api/v1/workers/w/inbox?limit=500", headers=headers)
        assert listed.status_code == 200, listed.text
        items = listed.json()["items"]
        assert len(items) == 200 and len({i["dedupe_key"] for i in items}) == 200
        accepted_ids = {i["item_id"] for a in answers for i in a["items"] if not i["duplicate"]}
        assert {i["item_id"] for i in items} == accepted_ids
        keys.revoke("acme", key_id)
        refused = client.post("/api/v1/webhook/ingest/w", json={"id": "late"}, headers=headers)
        assert refused.status_code == 401, refused.text
