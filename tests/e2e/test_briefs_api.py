"""Briefs and WAITING plans over real HTTP: uvicorn, real keys, LiteLLM to the scripted model.

A plan parked through the API is woken by an event delivered through the API exactly once and
resumed through the router (one model call); a plan that needs confirmation is held and shows up
in the brief; tenants never see each other's plans or briefs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, serve
from genworker.testing.live_server import LiveServer


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"], "globex": ["gina"]})


def auth(workspace: Path, tenant: str, workers: list[str] | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant, workers)[1]}"}


def call(method: str, server: LiveServer, path: str, headers: dict[str, str], body: Any = None) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=headers, json=body, timeout=60)


def test_waiting_and_briefs_over_http(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    acme, globex = auth(workspace, "acme"), auth(workspace, "globex")
    with serve(tmp_path, workspace, model_server) as server:
        body = {
            "match_key": "github:issue:42:updated",
            "title": "Issue 42",
            "text": "Check what changed on issue 42",
            "plan_id": "p42",
        }
        created = call("POST", server, "/api/v1/workers/alice/waiting", acme, body)
        assert created.status_code == 201, created.text
        assert created.json()["plan"]["state"] == "waiting"
        held = {"match_key": "mail:thread:7:replied", "title": "Vendor quote", "requires_confirmation": True}
        assert call("POST", server, "/api/v1/workers/alice/waiting", acme, held).status_code == 201
        bad = call("POST", server, "/api/v1/workers/alice/waiting", acme, {"match_key": "no spaces allowed"})
        assert bad.status_code == 422 and "match_key" in bad.text

        # a key limited to some workers may not wake the whole tenant's plans
        limited = auth(workspace, "acme", ["alice"])
        denied = call("POST", server, "/api/v1/waiting/events", limited, {"match_key": "a:b", "event_id": "x"})
        assert denied.status_code == 403
        # another tenant's event with the same key wakes nothing here
        event = {"match_key": "github:issue:42:updated", "event_id": "gh-1"}
        assert call("POST", server, "/api/v1/waiting/events", globex, event).json()["woken"] == []
        assert call("GET", server, "/api/v1/workers/alice/waiting", globex).status_code == 404

        model_server.expect(Reply("Issue 42 was updated: a fix is proposed."))
        first = call("POST", server, "/api/v1/waiting/events?wait=true", acme, event).json()["woken"]
        again = call("POST", server, "/api/v1/waiting/events", acme, {**event, "event_id": "gh-2"}).json()["woken"]
        assert [(p["plan_id"], p["state"]) for p in first] == [("p42", "done")]
        assert again == []
        assert len(model_server.requests) == 1
        assert "Check what changed on issue 42" in str(model_server.requests[0]["messages"])

        woken = call(
            "POST", server, "/api/v1/waiting/events", acme, {"match_key": "mail:thread:7:replied", "event_id": "m1"}
        )
        [plan] = woken.json()["woken"]
        assert plan["state"] == "gated"  # needs a person: held for the brief
        listing = call("GET", server, "/api/v1/workers/alice/waiting?state=gated", acme).json()["plans"]
        assert [p["title"] for p in listing] == ["Vendor quote"]

        brief = call("POST", server, "/api/v1/workers/alice/briefs/generate", acme).json()["brief"]
        confirm = brief["sections"]["confirm"]
        assert [i["title"] for i in confirm] == ["Vendor quote needs your confirmation to continue"]
        assert [o["label"] for o in confirm[0]["options"]] == ["Resume now", "Cancel"]
        assert "4) Needs your confirmation (1)" in brief["text"]
        stored = call("GET", server, f"/api/v1/workers/alice/briefs/{brief['brief_id']}", acme)
        assert stored.json()["brief"]["text"] == brief["text"]
        assert call("GET", server, f"/api/v1/workers/gina/briefs/{brief['brief_id']}", globex).status_code == 404
        assert [b["brief_id"] for b in call("GET", server, "/api/v1/workers/alice/briefs", acme).json()["briefs"]] == [
            brief["brief_id"]
        ]
        pending = call("GET", server, "/api/v1/workers/alice/briefs/pending", acme).json()
        assert pending["items"] == [] and pending["interruption_budget"]["limit"] == 10

        cancelled = call("POST", server, f"/api/v1/workers/alice/waiting/{plan['plan_id']}/cancel", acme)
        assert cancelled.json()["plan"]["state"] == "cancelled"
        assert call("POST", server, f"/api/v1/workers/alice/waiting/{plan['plan_id']}/cancel", acme).status_code == 409
        assert call("GET", server, "/api/v1/workers/alice/waiting/nope", acme).status_code == 404


@pytest.mark.redis
def test_with_redis_url_briefs_and_plans_live_in_redis(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer, redis_url: str
) -> None:
    import uuid

    import redis

    tenant = f"t{uuid.uuid4().hex[:12]}"  # the runtime's key prefix is shared: keep to our own tenant
    workspace = small_workspace({tenant: ["alice"]})
    headers = auth(workspace, tenant)
    try:
        with serve(tmp_path, workspace, model_server, REDIS_URL=redis_url, GENWORKER_PROFILE="shared") as server:
            body = {"match_key": "github:issue:42:updated", "title": "Issue 42", "plan_id": "p42"}
            assert call("POST", server, "/api/v1/workers/alice/waiting", headers, body).status_code == 201
            brief = call("POST", server, "/api/v1/workers/alice/briefs/generate", headers).json()["brief"]
            [waiting] = brief["sections"]["waiting"]
            assert waiting["title"].startswith("Issue 42: waiting for github:issue:42:updated")
            listed = call("GET", server, "/api/v1/workers/alice/briefs", headers).json()["briefs"]
            assert [b["brief_id"] for b in listed] == [brief["brief_id"]]
        with redis.Redis.from_url(redis_url) as r:
            assert r.hexists(f"gw:{tenant}:briefs:alice:sent", brief["brief_id"])
        assert not (workspace / "tenants" / tenant / "workers/alice/runtime/briefs").exists()
        assert not (workspace / "tenants" / tenant / "workers/alice/runtime/waiting").exists()
    finally:
        with redis.Redis.from_url(redis_url) as r:
            keys = list(r.scan_iter(match=f"*{tenant}*"))
            if keys:
                r.delete(*keys)
