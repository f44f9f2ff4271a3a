"""The dashboard over the real app and runtime: login and session cookie, CSRF on cookie-authenticated
changes, tenant isolation of every dashboard call, the aggregated blocks, and one failing block
degrading alone. LiteLLM reaches the scripted model server over HTTP."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore, AuthError
from genworker.dashboard.session import SessionSigner, signer_for
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env, serve

GATED = (
    "---\nduty_id: pay\ntitle: Pay invoices\ntriggers: [{id: m, type: manual}, "
    "{id: nightly, type: schedule, cron: '0 22 * * *', timezone: Asia/Tokyo}]\n"
    "contract: {version: '1', approval: {required: true}}\n---\nPay the invoice.\n"
)
# a real third-party MCP server (a dev dependency), and one that cannot start
TIME_SERVER = {"name": "time", "command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


def alice_persona(mcp_servers: str = "[]") -> str:
    return (
        "---\nidentity: {name: Alice, worker_id: alice, role: assistant}\n"
        f"channels: [{{type: slack, adapter_id: team-slack}}]\nmcp_servers: {mcp_servers}\n---\nYou are alice.\n"
    )


GOAL = """---
goal_id: launch
title: Launch the product
milestones:
  - id: build
    title: Build it
    tasks:
      - {id: code, title: Write the code, status: in_progress}
      - {id: ship, title: Ship it, blocked_by: [code]}
---
"""


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(
        {"acme": ["alice", "bob"], "globex": ["gina"]},
        {
            "tenants/acme/workers/alice/duties/pay.md": GATED,
            "tenants/acme/workers/alice/goals/launch.md": GOAL,
            "tenants/acme/workers/alice/PERSONA.md": alice_persona(),
        },
    )


@contextmanager
def running(
    tmp_path: Path, workspace: Path, model: ScriptedModelServer, base_url: str = "http://testserver"
) -> Iterator[TestClient]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model)
    app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
    with TestClient(app, base_url=base_url) as client:
        yield client


def login(client: TestClient, key: str) -> str:
    """Log in; return the CSRF token."""
    response = client.post("/dashboard/login", json={"api_key": key})
    assert response.status_code == 200, response.text
    return str(client.get("/dashboard/session").json()["csrf_token"])


def gate(client: TestClient, key: str) -> str:
    """Run the gated duty: it waits for a confirmation; return its id."""
    ran = client.post("/api/v1/workers/alice/duties/pay/run", headers={"Authorization": f"Bearer {key}"})
    assert ran.status_code == 200 and ran.json()["run"]["state"] == "waiting_approval", ran.text
    listed = client.get("/api/v1/workers/alice/confirmations", headers={"Authorization": f"Bearer {key}"}).json()
    return str(listed["confirmations"][0]["confirmation_id"])


def test_the_page_and_assets_are_served_without_login_and_load_nothing_from_elsewhere(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as client:
        page = client.get("/dashboard")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        for asset in ("dashboard.js", "dashboard.css"):
            assert f"/dashboard/static/{asset}" in page.text
            body = client.get(f"/dashboard/static/{asset}")
            assert body.status_code == 200 and "http://" not in body.text and "https://" not in body.text
        assert "https://" not in page.text and "http://" not in page.text
        for bad in ("index.html", "..%2F__init__.py", "nope.js"):
            assert client.get(f"/dashboard/static/{bad}").status_code == 404


def test_login_is_required_and_sets_a_strict_http_only_cookie(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    with running(tmp_path, workspace, model_server) as client:
        assert client.get("/api/v1/workers/alice/dashboard").status_code == 401
        assert client.get("/dashboard/session").status_code == 401
        wrong = client.post("/dashboard/login", json={"api_key": key[:-2] + "xx"})
        assert wrong.status_code == 401 and "genworker_session" not in wrong.cookies
        assert client.post("/dashboard/login", json={}).status_code == 422
        assert (
            client.post("/dashboard/login", content=b"api_key", headers={"content-type": "text/plain"}).status_code
            == 415
        )
        foreign = client.post("/dashboard/login", json={"api_key": key}, headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "cross_origin"

        response = client.post("/dashboard/login", json={"api_key": key}, headers={"Origin": "http://testserver"})
        cookie = response.headers["set-cookie"]
        assert "genworker_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert "Secure" not in cookie and key not in cookie  # served over http here; the key never travels back
        session = client.get("/dashboard/session").json()
        assert session["tenant_id"] == "acme" and session["workers"] == ["alice", "bob"]
        assert session["default_worker"] == "alice" and session["csrf_token"]
        assert client.get("/api/v1/workers/alice/dashboard").status_code == 200

        assert client.post("/dashboard/logout").status_code == 204
        assert client.get("/api/v1/workers/alice/dashboard").status_code == 401


def test_the_form_login_redirects_and_a_https_cookie_is_secure(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    with running(tmp_path, workspace, model_server, base_url="https://testserver") as client:
        failed = client.post("/dashboard/login", data={"api_key": "gwk_nope"}, follow_redirects=False)
        assert failed.status_code == 303 and failed.headers["location"] == "/dashboard?login=failed"
        ok = client.post("/dashboard/login", data={"api_key": key}, follow_redirects=False)
        assert ok.status_code == 303 and ok.headers["location"] == "/dashboard"
        assert "Secure" in ok.headers["set-cookie"]
        assert client.get("/dashboard/session").status_code == 200


def test_a_logged_out_or_revoked_session_is_refused(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    store = ApiKeyStore(workspace)
    key_id, key = store.create("acme")
    with running(tmp_path, workspace, model_server) as client:
        login(client, key)
        stolen = client.cookies["genworker_session"]
        client.post("/dashboard/logout")
        client.cookies.set("genworker_session", stolen)
        assert client.get("/dashboard/session").status_code == 401  # logged out: the old cookie is dead
        login(client, key)
        assert client.get("/api/v1/workers/alice/dashboard").status_code == 200
        store.revoke("acme", key_id)
        assert client.get("/api/v1/workers/alice/dashboard").status_code == 401
        assert client.get("/dashboard/session").status_code == 401
        client.cookies.set("genworker_session", stolen.replace("acme", "globex"))  # a forged tenant
        assert client.get("/api/v1/workers/gina/dashboard").status_code == 401


def test_cookie_changes_need_the_csrf_header_and_approve_runs_the_task(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("invoice paid"))
    key = ApiKeyStore(workspace).create("acme")[1]
    with running(tmp_path, workspace, model_server) as client:
        confirmation = gate(client, key)
        csrf = login(client, key)
        blocks = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]
        (pending,) = blocks["pending"]["data"]["confirmations"]
        assert pending["id"] == confirmation and pending["text"]
        assert [t["state"] for t in blocks["tasks"]["data"]["active"]] == ["waiting_approval"]

        path = f"/api/v1/workers/alice/confirmations/{confirmation}/approve"
        refused = client.post(path)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
        assert client.post(path, headers={"X-CSRF-Token": "A" * len(csrf)}).status_code == 403
        approved = client.post(path, headers={"X-CSRF-Token": csrf})
        assert approved.status_code == 200, approved.text
        assert approved.json()["run"]["state"] == "completed" and approved.json()["output"] == "invoice paid"

        blocks = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]
        assert blocks["pending"]["data"]["confirmations"] == []
        tasks = blocks["tasks"]["data"]
        (done,) = tasks["done"]
        assert done["provenance"]["duty_id"] == "pay" and done["provenance"]["approval_ref"] == confirmation
        assert tasks["active"] == []
        assert [t["state"] for t in tasks["ended"]] == ["superseded"]
        assert tasks["ended"][0]["provenance"]["duty_id"] == "pay"
        assert blocks["runs"]["data"]["totals"]["model_calls"] == 1
        assert any(r["deliverables"] or r["model_usage"] for r in blocks["runs"]["data"]["runs"])
        assert any(d["action"] == "gated" and d["reasons"] for d in blocks["decisions"]["data"])
        assert any("approved by key:" in a["text"] for a in blocks["activity"]["data"])


def test_reject_from_a_cookie_session_cancels_the_waiting_run(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    with running(tmp_path, workspace, model_server) as client:
        confirmation = gate(client, key)
        csrf = login(client, key)
        rejected = client.post(
            f"/api/v1/workers/alice/confirmations/{confirmation}/reject", headers={"X-CSRF-Token": csrf}
        )
        assert rejected.status_code == 200 and rejected.json()["confirmation"]["status"] == "rejected"
        tasks = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]["tasks"]["data"]
        assert [t["state"] for t in tasks["ended"]] == ["cancelled"] and tasks["active"] == tasks["failed"] == []


def test_every_dashboard_call_is_tenant_scoped(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    store = ApiKeyStore(workspace)
    acme_alice_only = store.create("acme", ["alice"])[1]
    globex = store.create("globex")[1]
    with running(tmp_path, workspace, model_server) as client:
        login(client, acme_alice_only)
        session = client.get("/dashboard/session").json()
        assert session["workers"] == ["alice"] and session["default_worker"] == "alice"
        for worker in ("bob", "gina", "globex%2Fgina", "globex/gina", "nobody", "..", "acme%2Fbob"):
            response = client.get(f"/api/v1/workers/{worker}/dashboard")
            assert response.status_code == 404, (worker, response.status_code)
        blocks = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]
        assert [w["worker_id"] for w in blocks["workers"]["data"]] == ["alice"]
        assert client.get("/api/v1/workers/alice/confirmations").status_code == 200
        assert client.get("/api/v1/workers/bob/confirmations").status_code == 404

        client.cookies.clear()
        as_globex = {"Authorization": f"Bearer {globex}"}
        assert client.get("/api/v1/workers/gina/dashboard", headers=as_globex).status_code == 200
        assert client.get("/api/v1/workers/alice/dashboard", headers=as_globex).status_code == 404


def test_the_blocks_show_calendar_goals_and_capabilities(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    servers = f"[{json.dumps(TIME_SERVER)}, {{name: missing, command: /nonexistent/mcp-server}}]"
    (workspace / "tenants/acme/workers/alice/PERSONA.md").write_text(alice_persona(servers), encoding="utf-8")
    with running(tmp_path, workspace, model_server) as client:
        body = client.get("/api/v1/workers/alice/dashboard", headers={"Authorization": f"Bearer {key}"}).json()
    blocks = body["blocks"]
    assert body["worker_id"] == "alice" and body["tenant_id"] == "acme"
    assert blocks["profile"]["data"]["timezone"] == "Asia/Tokyo"
    calendar = blocks["calendar"]["data"]
    assert calendar["timezone"] == "Asia/Tokyo"
    fires = [e for e in calendar["entries"] if e.get("duty_id") == "pay"]
    assert len(fires) == 5 and all(e["local"].endswith("22:00 JST") for e in fires)
    checks = [e for e in calendar["entries"] if e["kind"] == "goal_check"]
    assert [c["schedule"] for c in checks] == ["every 1 h"]  # the lifecycle's goal progress check (default)
    first = datetime.fromisoformat(fires[0]["at"])
    assert first > datetime.now(UTC) and first.hour == 13  # 22:00 in Tokyo is 13:00 UTC
    (goal,) = blocks["goals"]["data"]
    assert goal["goal_id"] == "launch" and goal["progress"] == {"done": 0, "total": 2}
    assert goal["health"] == "on_track"  # no deadlines: nothing is late
    assert goal["blocked_tasks"] == [{"id": "ship", "title": "Ship it", "waiting_on": ["code"]}]
    tools = {t["name"]: t for t in blocks["capabilities"]["data"]["tools"]}
    assert tools["file_read"]["effect"] == "read" and tools["file_write"]["effect"] == "write"
    servers = {m["name"]: m for m in blocks["capabilities"]["data"]["mcp_servers"]}
    assert servers["time"]["status"] == "ready" and "time__get_current_time" in servers["time"]["tools"]
    assert servers["missing"]["status"] == "degraded" and "No such file" in servers["missing"]["reason"]
    assert tools["time__get_current_time"]["source"] == "mcp:time"
    (channel,) = blocks["channels"]["data"]["channels"]
    assert channel["adapter_id"] == "acme~alice~team-slack" and channel["status"] == "missing_credentials"
    assert blocks["briefs"]["data"]["briefs"] == [] and blocks["briefs"]["data"]["pending"] == []
    assert blocks["suggestions"]["status"] in ("ok", "unavailable")  # ok once the runtime wires a CommandBackend
    assert {b["status"] for n, b in blocks.items() if n != "suggestions"} == {"ok"}


def test_a_failing_service_degrades_its_blocks_and_not_the_page(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    runs = workspace / "tenants/acme/workers/alice/runs"
    runs.mkdir(parents=True)
    (runs / "run-broken.json").write_text(json.dumps({"schema_version": 99}), encoding="utf-8")
    with running(tmp_path, workspace, model_server) as client:
        response = client.get("/api/v1/workers/alice/dashboard", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    blocks: dict[str, Any] = response.json()["blocks"]
    failed = {n for n, b in blocks.items() if b["status"] == "error"}
    assert failed == {"tasks", "runs", "activity", "decisions"}, blocks
    assert "schema_version" in blocks["runs"]["reason"] and "runs/run-broken.json" in blocks["runs"]["reason"]
    assert str(workspace) not in blocks["runs"]["reason"]  # tenants see workspace-relative paths only
    assert blocks["calendar"]["status"] == blocks["goals"]["status"] == blocks["pending"]["status"] == "ok"


def test_session_cookies_expire_resist_tampering_and_the_secret_file_is_checked(
    small_workspace: Callable[..., Path],
) -> None:
    root = small_workspace({"acme": ["alice"], "globex": ["gina"]})
    signer = signer_for(root, "acme")
    assert signer is not None and signer_for(root, "acme") is signer
    secret_file = root / "tenants/acme/auth/dashboard_session.json"  # git-ignored, next to the API keys
    assert oct(secret_file.stat().st_mode & 0o777) == "0o600"
    assert json.loads(secret_file.read_text(encoding="utf-8"))["schema_version"] == 1
    again = SessionSigner.for_tenant(root / "tenants/acme")  # another process on the same workspace
    assert again.check(signer.issue("k1", "acme").cookie) is not None
    for ghost in ("ghost", "..", "a/b"):
        assert signer_for(root, ghost) is None  # a forged cookie's tenant creates nothing
    assert not (root / "tenants/ghost").exists()
    globex = signer_for(root, "globex")
    assert globex is not None

    session = signer.issue("k1", "acme.corp", now=1_000)
    assert signer.check(session.cookie, now=1_001) == session
    assert signer.check(session.cookie, now=1_000 + signer.ttl_s) is None  # expired
    payload, _, mac = session.cookie.rpartition("~")
    assert signer.check(payload.replace("acme.corp", "globex") + "~" + mac, now=1_001) is None
    assert signer.check(session.cookie + "x", now=1_001) is None and signer.check("junk", now=1_001) is None
    assert globex.check(session.cookie, now=1_001) is None  # each tenant signs with its own secret
    assert not globex.csrf_ok(session, signer.csrf_token(session))
    live = signer.issue("k1", "acme")
    signer.end(live)
    assert again.check(live.cookie) is None  # logged out for every process
    secret_file.write_text('{"schema_version": 2, "secret": "00"}', encoding="utf-8")
    with pytest.raises(AuthError, match=r"dashboard_session\.json.*schema_version 2"):
        SessionSigner.for_tenant(root / "tenants/acme")


def test_refused_files_show_to_their_tenant_and_to_keys_of_those_workers_only(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    store = ApiKeyStore(workspace)
    acme, acme_bob, globex = store.create("acme")[1], store.create("acme", ["bob"])[1], store.create("globex")[1]
    alice = workspace / "tenants/acme/workers/alice/PERSONA.md"
    tenant = workspace / "tenants/acme/TENANT.json"
    good_alice, good_tenant = alice.read_text(encoding="utf-8"), tenant.read_text(encoding="utf-8")
    carl = workspace / "tenants/acme/workers/carl/PERSONA.md"  # broken from the start: never served
    carl.parent.mkdir(parents=True)
    carl.write_text("---\nidentity: {name: Carl, worker_id: carl, role: [clerk]}\n---\n", encoding="utf-8")

    with serve(tmp_path, workspace, model_server) as server:

        def problems(key: str, worker: str) -> list[dict[str, Any]]:
            response = httpx.get(
                f"{server.url}/api/v1/workers/{worker}/dashboard", headers={"Authorization": f"Bearer {key}"}
            )
            assert response.status_code == 200, response.text
            block = response.json()["blocks"]["load_errors"]
            assert block["status"] == "ok", block
            found: list[dict[str, Any]] = block["data"]["problems"]
            return found

        def reload(key: str, body: dict[str, str] | None = None) -> dict[str, Any]:
            headers = {"Authorization": f"Bearer {key}"}
            answer = httpx.post(f"{server.url}/api/v1/worker/ops/reload", json=body, headers=headers, timeout=60)
            assert answer.status_code == 200, answer.text
            outcome: dict[str, Any] = answer.json()
            return outcome

        (never,) = problems(acme, "alice")
        assert never["worker_id"] == "carl" and never["serving"] == "none"
        assert never["errors"][0]["file"] == "tenants/acme/workers/carl/PERSONA.md"

        alice.write_text(alice_persona().replace("role: assistant", "role: {a: 1}"), encoding="utf-8")
        assert reload(acme, {"worker_id": "alice"})["kept_last_good"]
        listed = {p["worker_id"]: p for p in problems(acme, "bob")}
        assert set(listed) == {"alice", "carl"}
        assert listed["alice"]["serving"] == "last_good"
        (error,) = listed["alice"]["errors"]
        assert error["file"] == "tenants/acme/workers/alice/PERSONA.md" and error["line"] == 2
        assert error["field"] == "identity.role" and error["message"]
        assert str(workspace) not in json.dumps(listed)  # workspace-relative paths only

        assert problems(acme_bob, "bob") == []  # a key for bob sees nothing of alice's or carl's files
        assert problems(globex, "gina") == []  # nor does another tenant

        tenant.write_text("{not json", encoding="utf-8")
        assert reload(acme)["kept_last_good"]
        (whole,) = [p for p in problems(acme_bob, "bob") if p["worker_id"] is None]  # every key of the tenant
        assert whole["serving"] == "last_good" and whole["errors"][0]["file"] == "tenants/acme/TENANT.json"
        assert problems(globex, "gina") == []

        tenant.write_text(good_tenant, encoding="utf-8")
        alice.write_text(good_alice, encoding="utf-8")
        carl.write_text(
            "---\nidentity: {name: Carl, worker_id: carl, role: clerk}\n---\nYou are carl.\n", encoding="utf-8"
        )
        assert reload(acme)["ok"]
        assert problems(acme, "alice") == [] and problems(acme_bob, "bob") == []
