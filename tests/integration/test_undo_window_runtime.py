"""The undo window through the real runtime: an event carrying confidence and two independent
sources fires a duty; the Policy Gate allows high-risk auto on condition of the undo window, so
the run's external MCP call (a real stdio server that appends to a file) is held as a deferred
action. It executes once when the window ends, never when undone over HTTP, and a restart after
its deadline executes it exactly once. Below the threshold, with one source, without the tenant
switch or for an irreversible action the same event becomes a confirmation and nothing is held."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.duties import FireOutcome
from genworker.bus import Event, new_event
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env

MAIL_SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("mail")

@server.tool()
def notify(text: str) -> str:
    """Send a notification to the team."""
    with open(sys.argv[1], "a", encoding="utf-8") as fh:
        fh.write(text + "\\n")
    return "sent"

server.run("stdio")
'''
DUTY = (
    "---\nduty_id: ops\ntitle: Ops status\ntriggers: [{id: fact, type: event, source: sensor.ops}]\n---\n"
    "Move the ticket's status and notify the team.\n"
)
GOOD = {
    "confidence": 0.97,
    "evidence_sources": ["github", "pagerduty"],
    "requested_actions": ["internal_status_transition"],
    "requested_effects": ["external"],
}


def persona(server: Path, sent: Path) -> str:
    mail = {
        "name": "mail",
        "command": sys.executable,
        "args": [str(server), str(sent)],
        "tool_effects": {"notify": {"effect": "external"}},
    }
    return (
        "---\nidentity: {name: Alice, worker_id: alice, role: ops}\nmode: personal\n"
        f"mcp_servers: [{json.dumps(mail)}]\n---\nYou are alice.\n"
    )


def tenant(tenant_id: str, worker: str, policy: dict[str, Any]) -> str:
    return json.dumps({"tenant_id": tenant_id, "trust_level": 2, "default_worker": worker, "policy": policy})


@pytest.fixture
def sent(tmp_path: Path) -> Path:
    return tmp_path / "sent.txt"


@pytest.fixture
def build(small_workspace: Callable[..., Path], tmp_path: Path, sent: Path) -> Callable[..., Path]:
    server = tmp_path / "mail_server.py"
    server.write_text(MAIL_SERVER, encoding="utf-8")

    def workspace(**policy: Any) -> Path:
        return small_workspace(
            {"acme": ["alice"], "globex": ["gina"]},
            {
                "tenants/acme/TENANT.json": tenant("acme", "alice", {"high_risk_auto_enabled": True, **policy}),
                "tenants/acme/workers/alice/PERSONA.md": persona(server, sent),
                "tenants/acme/workers/alice/duties/ops.md": DUTY,
            },
        )

    return workspace


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    settings = load_settings(tmp_path / "configs", scripted_env(model), workspace=workspace)
    with TestClient(create_app(settings)) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def fire(client: TestClient, runtime: Runtime, payload: dict[str, Any]) -> FireOutcome:
    event = new_event("fact.detected", source="sensor.ops", tenant_id="acme", worker_id="alice", payload=payload)
    [outcome] = client.portal.call(runtime.services.duties.on_event, event)  # type: ignore[union-attr]
    return outcome


def join(client: TestClient, runtime: Runtime) -> None:
    client.portal.call(runtime.tools.undo.join)  # type: ignore[union-attr]


def watch(client: TestClient, runtime: Runtime, topic: str) -> Callable[[], Awaitable[Event]]:
    """Subscribe now; the returned coroutine function waits (bounded) for the first such event."""
    seen: list[Event] = []
    arrived = asyncio.Event()

    async def handler(event: Event) -> None:
        seen.append(event)
        arrived.set()

    runtime.services.bus.subscribe(topic, handler)

    async def first() -> Event:
        await asyncio.wait_for(arrived.wait(), 10)
        return seen[0]

    return first


def auth(workspace: Path, tenant_id: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant_id)[1]}"}


def notify_then_done(model: ScriptedModelServer) -> None:
    model.expect(Reply(tool_calls=(ToolCallReply("mail__notify", {"text": "status moved"}),)), Reply("done"))


def lines(sent: Path) -> list[str]:
    return sent.read_text(encoding="utf-8").splitlines() if sent.exists() else []


def test_a_held_call_executes_once_when_its_window_ends(
    tmp_path: Path, build: Callable[..., Path], sent: Path, model_server: ScriptedModelServer
) -> None:
    workspace = build(undo_window_seconds=1)
    headers = auth(workspace)
    notify_then_done(model_server)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        executed = watch(client, runtime, "undo.executed")
        outcome = fire(client, runtime, GOOD)
        assert outcome.run.state == "completed" and lines(sent) == []  # the run ended; the call waits
        run = client.get(f"/api/v1/workers/alice/runs/{outcome.run.run_id}", headers=headers).json()
        assert run["provenance"]["governance_decision"]["action"] == "auto"
        [held] = client.get("/api/v1/workers/alice/deferred-actions?state=pending", headers=headers).json()[
            "deferred_actions"
        ]
        assert (held["tool"], held["arguments"], held["run_id"]) == ("mail__notify", {"text": "status moved"},
                                                                     outcome.run.run_id)  # fmt: skip
        join(client, runtime)
        assert lines(sent) == ["status moved"]
        done = client.get(f"/api/v1/workers/alice/deferred-actions/{held['undo_id']}", headers=headers).json()
        assert (done["state"], done["outcome"]) == ("executed", "sent")
        event = client.portal.call(executed)  # type: ignore[union-attr]
        assert (event.worker_id, event.payload["undo_id"], event.payload["tool"]) == ("alice", held["undo_id"],
                                                                                     "mail__notify")  # fmt: skip
        late = client.post(f"/api/v1/workers/alice/deferred-actions/{held['undo_id']}/undo", headers=headers)
        assert late.status_code == 409 and "already executed" in late.json()["error"]["message"]
        with pytest.raises(ValueError, match="too late to undo"):  # the IM /undo says so too
            client.portal.call(runtime.services.command_backend.undo, "acme", "alice", held["undo_id"], "im:dana")  # type: ignore[union-attr]
    tool_result = model_server.requests[1]["messages"][-1]["content"]
    assert "unless a person undoes it" in tool_result and held["undo_id"] in tool_result


def test_an_undo_before_the_deadline_means_it_never_executes_and_other_tenants_get_404(
    tmp_path: Path, build: Callable[..., Path], sent: Path, model_server: ScriptedModelServer
) -> None:
    workspace = build(undo_window_seconds=3600)
    headers, other = auth(workspace), auth(workspace, "globex")
    notify_then_done(model_server)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        fire(client, runtime, GOOD)
        [held] = client.get("/api/v1/workers/alice/deferred-actions", headers=headers).json()["deferred_actions"]
        uid = held["undo_id"]
        backend = runtime.services.command_backend  # what /deferred and /undo in IM use
        assert backend is not None
        [listed] = client.portal.call(backend.deferred, "acme", "alice")  # type: ignore[union-attr]
        assert (listed["id"], listed["tool"]) == (uid, "mail__notify")
        assert client.post(f"/api/v1/workers/alice/deferred-actions/{uid}/undo", headers=other).status_code == 404
        assert client.post(f"/api/v1/workers/gina/deferred-actions/{uid}/undo", headers=other).status_code == 404
        assert client.get("/api/v1/workers/alice/deferred-actions", headers=other).status_code == 404
        undone = client.post(f"/api/v1/workers/alice/deferred-actions/{uid}/undo", headers=headers)
        assert undone.status_code == 200 and undone.json()["state"] == "undone"
        assert undone.json()["decided_by"].startswith("key:")
        join(client, runtime)  # the timer woke up, found it undone, and ended
        again = client.post(f"/api/v1/workers/alice/deferred-actions/{uid}/undo", headers=headers)
        assert again.status_code == 409
        assert client.post("/api/v1/workers/alice/deferred-actions/undo_0000/undo", headers=headers).status_code == 404
    assert lines(sent) == []


def test_a_restart_after_the_deadline_executes_the_held_call_exactly_once(
    tmp_path: Path, build: Callable[..., Path], sent: Path, model_server: ScriptedModelServer
) -> None:
    workspace = build(undo_window_seconds=3600)
    notify_then_done(model_server)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        fire(client, runtime, GOOD)
    [path] = (workspace / "tenants/acme/workers/alice/runtime/undo").glob("undo_*.json")
    record = json.loads(path.read_text(encoding="utf-8"))
    assert record["state"] == "pending" and lines(sent) == []
    # the downtime outlasted the window: its deadline is now in the past
    record["execute_at"] = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    path.write_text(json.dumps(record), encoding="utf-8")
    for _ in range(2):  # the first start executes it, the second finds nothing to do
        with running(tmp_path, workspace, model_server) as (client, runtime):
            join(client, runtime)
            assert lines(sent) == ["status moved"]
    assert not path.exists()  # decided: moved out of the open records recovery reads
    assert json.loads((path.parent / "decided" / path.name).read_text(encoding="utf-8"))["state"] == "executed"


@pytest.mark.parametrize(
    ("policy", "payload", "unmet"),
    [
        ({}, {**GOOD, "confidence": 0.5}, "confidence >= 0.92 (got 0.5)"),
        ({}, {**GOOD, "evidence_sources": ["github"]}, ">= 2 independent sources (got 1)"),
        ({"high_risk_auto_enabled": False}, GOOD, "the tenant to enable high_risk_auto_enabled"),
        ({}, {**GOOD, "requested_actions": ["external_commitment_send"]}, "is irreversible"),
    ],
    ids=["below-threshold", "one-source", "switch-off", "irreversible"],
)
def test_without_every_condition_the_event_becomes_a_confirmation(
    tmp_path: Path,
    build: Callable[..., Path],
    sent: Path,
    model_server: ScriptedModelServer,
    policy: dict[str, Any],
    payload: dict[str, Any],
    unmet: str,
) -> None:
    workspace = build(undo_window_seconds=1, **policy)
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        outcome = fire(client, runtime, payload)
        assert outcome.run.state == "waiting_approval"
        [pending] = client.get("/api/v1/workers/alice/confirmations", headers=headers).json()["confirmations"]
        assert unmet in " ".join(pending["reasons"])
        assert client.get("/api/v1/workers/alice/deferred-actions", headers=headers).json()["deferred_actions"] == []
    assert model_server.requests == [] and lines(sent) == []


def test_an_approved_confirmation_runs_with_its_evidence_and_is_not_held(
    tmp_path: Path, build: Callable[..., Path], sent: Path, model_server: ScriptedModelServer
) -> None:
    workspace = build(undo_window_seconds=3600, high_risk_auto_enabled=False)
    headers = auth(workspace)
    notify_then_done(model_server)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        fire(client, runtime, GOOD)
        [pending] = client.get("/api/v1/workers/alice/confirmations", headers=headers).json()["confirmations"]
        assert pending["evidence"] == GOOD
        body = client.post(f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/approve", headers=headers)
        run = client.get(f"/api/v1/workers/alice/runs/{body.json()['run']['run_id']}", headers=headers).json()
        assert run["provenance"]["approval_ref"] == pending["confirmation_id"]  # the same gate accepted it
        assert lines(sent) == ["status moved"]  # a person approved: nothing is held
        assert client.get("/api/v1/workers/alice/deferred-actions", headers=headers).json()["deferred_actions"] == []
