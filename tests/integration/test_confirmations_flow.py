"""Confirmations through the real runtime: gated work becomes a stored confirmation and a
`task.confirmation_requested` inbox item; approving runs it once with the approval_ref (it does not
come back to the gate); rejecting cancels the waiting run; the IM command backend does the same."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.inbox import InboxItem
from genworker.engine.events import ApprovalRequired
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.worker.confirmations.models import CONFIRMATION_CLOSED, CONFIRMATION_REQUESTED, POLICY_TIMEOUT
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent
from genworker.worker.task import RunRef

APPROVE = (
    "---\nduty_id: pay\ntitle: Pay invoices\ntriggers: [{id: m, type: manual}]\n"
    "contract: {version: '1', approval: {required: true}}\n---\nPay the invoice.\n"
)


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(
        {"acme": ["alice"], "globex": ["gina"]}, {"tenants/acme/workers/alice/duties/pay.md": APPROVE}
    )


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def gate(client: TestClient, runtime: Runtime) -> tuple[str, str]:
    """Route the gated duty; (confirmation id, waiting run id)."""

    async def collect() -> list[RouterEvent]:
        req = RouteRequest(
            "acme", "alice", "Pay the invoice", "duty", duty_id="pay", trigger_id="m", conversational=False
        )
        return [e async for e in runtime.services.router.route_stream(req)]

    events = client.portal.call(collect)  # type: ignore[union-attr]
    done = events[-1]
    assert isinstance(done, RouteDone) and done.record.state == "waiting_approval"
    asked = next(e for e in events if isinstance(e, ApprovalRequired))
    return asked.call_id, done.record.run_id


def inbox(client: TestClient, runtime: Runtime) -> tuple[InboxItem, ...]:
    async def items() -> tuple[InboxItem, ...]:
        return await runtime.services.inbox.list("acme", "alice")

    return client.portal.call(items)  # type: ignore[union-attr]


def auth(workspace: Path, tenant: str = "acme") -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant)[1]}"}


def test_gated_work_is_announced_in_the_inbox_and_approval_runs_it_once(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("paid"))
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        cid, waiting = gate(client, runtime)
        (item,) = inbox(client, runtime)
        assert (item.event_type, item.source_type, item.source_id) == (CONFIRMATION_REQUESTED, "confirmation", cid)
        assert item.payload["run_id"] == waiting and "approval_required" in " ".join(item.payload["reasons"])
        listed = client.get("/api/v1/workers/alice/confirmations?status=pending", headers=headers).json()
        assert [c["confirmation_id"] for c in listed["confirmations"]] == [cid]
        body = client.post(f"/api/v1/workers/alice/confirmations/{cid}/approve", headers=headers).json()
        assert body["output"] == "paid" and body["run"]["state"] == "completed"
        new_run = client.get(f"/api/v1/workers/alice/runs/{body['run']['run_id']}", headers=headers).json()
        assert new_run["provenance"]["approval_ref"] == cid
        assert new_run["provenance"]["governance_decision"]["action"] == "auto"  # past the gate, not back to it
        everything = client.get("/api/v1/workers/alice/confirmations", headers=headers).json()["confirmations"]
        assert [(c["confirmation_id"], c["status"]) for c in everything] == [(cid, "approved")]  # no second gate
        assert client.get(f"/api/v1/workers/alice/runs/{waiting}", headers=headers).json()["state"] == "superseded"
        one = client.get(f"/api/v1/workers/alice/confirmations/{cid}", headers=headers).json()
        assert one["decided_by"].startswith("key:")
    assert len(model_server.requests) == 1


def test_rejection_cancels_the_waiting_run_and_decisions_are_final(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):
        cid, waiting = gate(client, runtime)
        rejected = client.post(f"/api/v1/workers/alice/confirmations/{cid}/reject", headers=headers)
        assert rejected.status_code == 200 and rejected.json()["confirmation"]["status"] == "rejected"
        assert client.get(f"/api/v1/workers/alice/runs/{waiting}", headers=headers).json()["state"] == "cancelled"
        again = client.post(f"/api/v1/workers/alice/confirmations/{cid}/approve", headers=headers)
        assert again.status_code == 409 and "already rejected" in again.json()["error"]["message"]
        unknown = client.post("/api/v1/workers/alice/confirmations/cf_0000000000000000/approve", headers=headers)
        assert unknown.status_code == 404
        other = auth(workspace, "globex")
        assert client.get("/api/v1/workers/alice/confirmations", headers=other).status_code == 404
    assert model_server.requests == []


def test_the_im_command_backend_lists_and_decides_confirmations(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("paid via IM"))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        backend = runtime.services.command_backend
        assert backend is not None
        cid, waiting = gate(client, runtime)
        (pending,) = backend.confirmations("acme", "alice")
        assert pending["id"] == cid and pending["text"] == "Pay the invoice" and pending["reasons"]
        assert backend.status("acme", "alice")["pending_confirmations"] == 1

        async def decide(confirmation_id: str) -> dict[str, object]:
            return await backend.decide_confirmation("acme", "alice", confirmation_id, "approve", "im:dana")

        result = client.portal.call(decide, cid)  # type: ignore[union-attr]
        assert result["status"] == "approved" and result["run_state"] == "completed"
        assert result["output"] == "paid via IM" and result["decided_by"] == "im:dana"
        with pytest.raises(ValueError, match="already approved"):
            client.portal.call(decide, cid)  # type: ignore[union-attr]
        with pytest.raises(LookupError):
            client.portal.call(decide, "cf_0000000000000000")  # type: ignore[union-attr]
        assert backend.confirmations("acme", "alice") == []
        old = client.portal.call(runtime.services.router.tasks.get_run, RunRef("acme", "alice", waiting))  # type: ignore[union-attr]
        assert old.state == "superseded"


def test_the_runtime_schedules_the_lifecycle_jobs(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        jobs = runtime.services.lifecycle
        assert jobs is not None and jobs.running
        assert set(jobs.jobs()) == {"lifecycle:goals", "lifecycle:confirmations", "lifecycle:suggestions"}
        assert jobs.jobs()["lifecycle:confirmations"].trigger.interval.total_seconds() == 60
        gate(client, runtime)
        client.portal.call(jobs.remind)  # type: ignore[union-attr]
        client.portal.call(jobs.check_goals)  # type: ignore[union-attr]
        client.portal.call(jobs.detect_suggestions)  # type: ignore[union-attr]
        assert jobs.last_error == {}
        assert [i.event_type for i in inbox(client, runtime)] == [CONFIRMATION_REQUESTED]  # not due yet
    assert not jobs.running


def test_the_persona_policy_closes_an_unanswered_confirmation(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    persona = (
        "---\nidentity: {name: Alice, worker_id: alice, reports_to: dana@acme.example}\n"
        "policy: {waiting_default_timeout_hours: 2, waiting_timeout_action: close}\n---\nYou are Alice.\n"
    )
    workspace = small_workspace(
        {"acme": ["alice"]},
        {"tenants/acme/workers/alice/duties/pay.md": APPROVE, "tenants/acme/workers/alice/PERSONA.md": persona},
    )
    with running(tmp_path, workspace, model_server) as (client, runtime):
        cid, waiting = gate(client, runtime)
        jobs = runtime.services.lifecycle
        assert jobs is not None and jobs.reminders is not None
        reminders = jobs.reminders

        async def scan_at(hours: float) -> list[str]:
            later = datetime.now(UTC) + timedelta(hours=hours)
            return [r.kind for r in await reminders.scan([("acme", "alice")], now=later)]

        assert client.portal.call(scan_at, 1) == []  # type: ignore[union-attr]
        assert client.portal.call(scan_at, 3) == ["close"]  # type: ignore[union-attr]
        run = client.portal.call(runtime.services.router.tasks.get_run, RunRef("acme", "alice", waiting))  # type: ignore[union-attr]
        assert run.state == "cancelled"
        kinds = [i.event_type for i in inbox(client, runtime)]
        assert kinds == [CONFIRMATION_REQUESTED, CONFIRMATION_CLOSED]
        closed = runtime.services.router.confirmations.get("acme", "alice", cid)
        assert closed is not None and (closed.status, closed.decided_by) == ("rejected", POLICY_TIMEOUT)


def test_a_tool_call_waiting_for_approval_runs_once_approved_and_the_task_continues(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    persona = (
        "---\nidentity: {name: Alice, worker_id: alice}\n"
        "tool_effect_overrides: {file_write: {requires_approval: true}}\n---\nYou are Alice.\n"
    )
    workspace = small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/PERSONA.md": persona})
    write = ToolCallReply("file_write", {"path": "files/notes.txt", "content": "ship on Friday"}, "call_w1")
    listing = ToolCallReply("file_list", {"path": "files"}, "call_l1")

    def continues_where_it_stopped(body: dict[str, Any]) -> None:  # the checkpoint plus the approved result
        *_, user, assistant, listed, approved = body["messages"]
        assert user["role"] == "user" and user["content"].startswith("Write down: ship on Friday")
        assert [c["id"] for c in assistant["tool_calls"]] == ["call_l1", "call_w1"]
        assert listed["tool_call_id"] == "call_l1"
        assert approved["role"] == "tool" and approved["tool_call_id"] == "call_w1"
        assert "notes.txt" in approved["content"]

    model_server.expect(
        Reply(tool_calls=(listing, write)), Reply("Noted in files/notes.txt.", check=continues_where_it_stopped)
    )
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as (client, runtime):

        async def ask() -> RouterEvent:
            req = RouteRequest("acme", "alice", "Write down: ship on Friday", conversational=False)
            return [e async for e in runtime.services.router.route_stream(req)][-1]

        done = client.portal.call(ask)  # type: ignore[union-attr]
        assert isinstance(done, RouteDone) and done.record.state == "waiting_approval"
        notes = workspace / "tenants/acme/workers/alice/files/notes.txt"
        assert not notes.exists()
        (pending,) = client.get("/api/v1/workers/alice/confirmations", headers=headers).json()["confirmations"]
        assert pending["kind"] == "tool" and pending["tool_call"]["name"] == "file_write"
        assert pending["run_id"] == done.record.run_id
        (item,) = inbox(client, runtime)
        assert item.event_type == CONFIRMATION_REQUESTED and item.source_id == pending["confirmation_id"]
        body = client.post(f"/api/v1/workers/alice/confirmations/{pending['confirmation_id']}/approve", headers=headers)
        assert body.status_code == 200 and body.json()["output"] == "Noted in files/notes.txt."
        assert notes.read_text(encoding="utf-8") == "ship on Friday"
        old = client.get(f"/api/v1/workers/alice/runs/{done.record.run_id}", headers=headers).json()
        assert old["state"] == "superseded"
        audit = (workspace / "tenants/acme/workers/alice/runtime/tool_audit.jsonl").read_text(encoding="utf-8")
        approved = [json.loads(line) for line in audit.splitlines() if '"approved": true' in line]
        assert [(a["tool"], a["call_id"]) for a in approved] == [("file_write", "call_w1")]
        listed = [line for line in audit.splitlines() if '"call_l1"' in line]
        assert len(listed) == 1  # the call before the interrupt is not run again
