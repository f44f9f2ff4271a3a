"""The inbox and heartbeat API over real HTTP: uvicorn, real keys, LiteLLM to the scripted model.

Facts reach the inbox the way a sensor in another process writes them: through a FileInboxStore of
its own on the same workspace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, InboxItem, new_item
from genworker.testing import Reply, ScriptedModelServer, serve
from genworker.testing.live_server import LiveServer

SILENT = '{"attention": false, "message": ""}'


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice", "bob"], "globex": ["gina"]})


def auth(workspace: Path, tenant: str, workers: list[str] | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant, workers)[1]}"}


def fact(worker: str = "alice", tenant: str = "acme", **kw: Any) -> InboxItem:
    return new_item(tenant, worker, "webhook", "hooks", "webhook.fact", {"title": kw.pop("title", "hello")}, **kw)


def sensed(workspace: Path, *items: InboxItem) -> None:
    """Written by "another process" sharing the workspace."""

    async def go() -> None:
        store = FileInboxStore(workspace)
        for item in items:
            assert await store.write(item)

    asyncio.run(go())


def get(server: LiveServer, path: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.get(server.url + path, headers=headers, timeout=60)


def post(server: LiveServer, path: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.url + path, headers=headers, timeout=60)


def test_the_inbox_lists_by_state_and_requeues_a_dead_item(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    done, dead, waiting = fact(title="done"), fact(title="dead"), fact(title="waiting")
    sensed(workspace, done, dead, waiting)

    async def settle_two() -> None:  # another runner consumed one item and gave up on another
        aggregate = InboxAggregate(FileInboxStore(workspace))
        claimed = {i.item_id: i for i in await aggregate.claim("acme", "alice", "elsewhere", limit=2)}
        await aggregate.consume(claimed[done.item_id], "elsewhere")
        await aggregate.fail(claimed[dead.item_id], "elsewhere", "the mail server said no", retry=False)

    asyncio.run(settle_two())
    acme = auth(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        listing = get(server, "/api/v1/workers/alice/inbox", acme).json()
        assert listing["counts"] == {"pending": 1, "processing": 0, "consumed": 1, "failed": 0, "dead": 1}
        assert [i["item_id"] for i in listing["items"]] == [done.item_id, dead.item_id, waiting.item_id]
        (item,) = get(server, "/api/v1/workers/alice/inbox?state=dead", acme).json()["items"]
        assert item["item_id"] == dead.item_id and item["last_error"] == "the mail server said no"
        assert get(server, "/api/v1/workers/alice/inbox?limit=1&offset=1", acme).json()["items"][0]["item_id"] == (
            dead.item_id
        )
        requeued = post(server, f"/api/v1/workers/alice/inbox/{dead.item_id}/requeue", acme)
        assert requeued.status_code == 200
        assert requeued.json()["item"]["state"] == "pending" and requeued.json()["item"]["attempts"] == 0
        consumed = post(server, f"/api/v1/workers/alice/inbox/{done.item_id}/requeue", acme)
        assert consumed.status_code == 409 and "consumed" in consumed.json()["error"]["message"]
        for missing in ("ibx_nope", ".."):  # ".." leaves the path before it is sent
            response = post(server, f"/api/v1/workers/alice/inbox/{missing}/requeue", acme)
            assert response.status_code == 404 and response.json()["error"]["code"] in (
                "inbox_item_not_found",
                "not_found",
            ), missing
        malformed = post(server, "/api/v1/workers/alice/inbox/a%20b/requeue", acme)
        assert malformed.status_code == 422 and malformed.json()["error"]["fields"][0]["loc"] == ["path", "item_id"]
        bad = get(server, "/api/v1/workers/alice/inbox?state=lost", acme)
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
        assert get(server, "/api/v1/workers/alice/inbox", acme).json()["counts"]["pending"] == 2


def test_run_the_heartbeat_now(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply(SILENT))
    item = fact(title="nightly backup ok")
    sensed(workspace, item)
    acme = auth(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        first = post(server, "/api/v1/workers/alice/heartbeat/run", acme)
        assert first.status_code == 200
        report = first.json()["report"]
        assert report["claimed"] == 1 and report["model_turns"] == 1
        assert report["summary"]["outcome"] == "silent"
        assert [(i["item_id"], i["action"], i["outcome"]) for i in report["items"]] == [
            (item.item_id, "summary", "silent")
        ]
        again = post(server, "/api/v1/workers/alice/heartbeat/run", acme).json()["report"]
        assert again["claimed"] == 0 and again["model_turns"] == 0 and again["summary"] is None
        state = get(server, "/api/v1/workers/alice/heartbeat", acme).json()
    assert len(model_server.requests) == 1  # the second heartbeat found nothing and called no model
    assert state["scheduled"] is False and state["meta"]["counters"]["silent"] == 1
    assert state["meta"]["cursor"]["last_item_id"] == item.item_id
    assert [a["item_id"] for a in state["attention"]] == [item.item_id]
    assert state["attention"][0]["outcome"] == "silent"


def test_run_and_wait_returns_the_isolated_run_it_started(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Certificate renewed; it is valid until March."))
    sensed(workspace, fact(title="TLS certificate expires in 3 days", route="isolated"))
    acme = auth(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        body = post(server, "/api/v1/workers/alice/heartbeat/run?wait=true", acme).json()
        (run,) = body["runs"]
        listed = get(server, "/api/v1/workers/alice/runs", acme).json()["runs"]
        record = get(server, f"/api/v1/workers/alice/runs/{run['run_id']}", acme).json()
    assert body["report"]["items"][0]["run_id"] == run["run_id"] and run["state"] == "completed"
    assert run["thread_id"].startswith("iso-") and run["run_id"] in [r["run_id"] for r in listed]
    assert record["provenance"]["source_type"] == "heartbeat"


def test_a_key_reaches_no_other_tenants_inbox_or_heartbeat(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    alices = fact(title="acme secret")
    sensed(workspace, alices, fact(worker="gina", tenant="globex", title="globex news"))
    globex, bob_only = auth(workspace, "globex"), auth(workspace, "acme", ["bob"])
    probes = [
        ("GET", "/api/v1/workers/alice/inbox"),
        ("GET", "/api/v1/workers/acme%2Falice/inbox"),
        ("POST", f"/api/v1/workers/alice/inbox/{alices.item_id}/requeue"),
        ("POST", "/api/v1/workers/alice/heartbeat/run"),
        ("GET", "/api/v1/workers/alice/heartbeat"),
    ]
    with serve(tmp_path, workspace, model_server) as server:
        for headers in (globex, bob_only):
            for method, path in probes:
                response = httpx.request(method, server.url + path, headers=headers, timeout=30)
                assert response.status_code == 404, (path, response.status_code, response.text)
                assert response.json()["error"]["code"] in ("worker_not_found", "not_found")
        for method, path in probes:
            assert httpx.request(method, server.url + path, timeout=30).status_code in (401, 404)
            if "%2F" not in path:
                assert httpx.request(method, server.url + path, timeout=30).status_code == 401
        own = get(server, "/api/v1/workers/gina/inbox", globex).json()
        assert [i["payload"]["title"] for i in own["items"]] == ["globex news"]
        assert get(server, "/api/v1/workers/bob/inbox", bob_only).json()["items"] == []
        acme = auth(workspace, "acme")
        still = get(server, "/api/v1/workers/alice/inbox?state=pending", acme).json()["items"]
    assert [i["item_id"] for i in still] == [alices.item_id]  # no probe claimed or ran anything
    assert model_server.requests == []
