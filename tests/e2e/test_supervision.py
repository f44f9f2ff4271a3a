"""The Supervisor over real HTTP with the scripted model (issue #33): a policy's tool allow-list stops
a run; the model reviewer's comment cites the step, streams as an AG-UI CUSTOM event, is kept with the
run (and shown in its run view) and its request for attention becomes a confirmation."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import pytest
from tests.e2e.test_chat_api import AGUI, chat, key, serve

from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.worker.confirmations.store import ConfirmationStore


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    ws = small_workspace({"acme": ["alice"], "globex": ["gina"]})
    files = ws / "tenants/acme/workers/alice/files"
    files.mkdir()
    (files / "notes.md").write_text("buy milk", encoding="utf-8")
    return ws


def policy(workspace: Path, name: str, body: dict[str, object]) -> None:
    folder = workspace / "tenants/acme/workers/alice/supervisors"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(body), encoding="utf-8")


def test_a_policy_attached_over_the_api_stops_a_run_outside_its_tool_allow_list(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Reading.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)))
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    with serve(tmp_path, workspace, model_server) as server:
        base = server.url + "/api/v1/workers/alice"
        bad = httpx.put(base + "/supervisors/strict", json={"budgets": {"tool_calls": "many"}}, headers=auth)
        assert bad.status_code == 422 and "body.budgets.tool_calls" in bad.text  # the body's schema is the policy's
        assert httpx.put(base + "/supervisors/strict", json={"tools": ["memory_*"]}, headers=auth).status_code == 200
        assert httpx.post(base + "/supervisors/nope/attach", json={"kind": "all"}, headers=auth).status_code == 404
        attached = httpx.post(base + "/supervisors/strict/attach", json={"kind": "all"}, headers=auth)
        assert attached.status_code == 200 and attached.json()["policy"]["attach"]["all"] is True
        listed = httpx.get(base + "/supervisors", headers=auth).json()["policies"]
        assert [p["file"] for p in listed] == ["supervisors/strict.json"]
        events = chat(server, api_key, {"worker_id": "alice", "message": "What does my note say?"})
        run_id = events[-1]["runId"]
        record = httpx.get(base + f"/runs/{run_id}/supervision", headers=auth).json()
        run = httpx.get(base + f"/runs/{run_id}", headers=auth).json()
        other = httpx.get(server.url + f"/api/v1/workers/alice/runs/{run_id}/supervision", headers=_other(workspace))
        resolved = httpx.post(base + f"/runs/{run_id}/supervision/resolve", headers=auth).json()
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "refused by supervisor 'strict'" in result["content"]
    decision = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "supervisor_decision")
    assert decision["value"]["check"] == "tool_allow_list" and decision["value"]["cites"] == ["c1"]
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"]["outcome"] == "supervisor_stopped"
    # its own outcome in the run record: neither a completion nor a plain failure
    assert run["state"] == "cancelled" and run["error"]["code"] == "supervisor_stopped"
    assert "stopped by supervisor 'strict' (tool_allow_list)" in run["error"]["message"]
    assert record["state"] == "paused" and record["decisions"][0]["action"] == "stop"
    assert other.status_code == 404  # another tenant's key does not see the worker
    assert resolved["state"] == "resolved" and resolved["resolved_by"].startswith("key:")


def _other(workspace: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {key(workspace, 'globex')}"}


def test_a_budget_pauses_the_run_as_budget_exceeded(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    policy(workspace, "budget", {"attach": {"all": True}, "budgets": {"tool_calls": 1}})
    read = ToolCallReply("file_read", {"path": "files/notes.md"}, "c1")
    model_server.expect(
        Reply("Reading.", tool_calls=(read,)),
        Reply("Again.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c2"),)),
    )
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "Read it twice"})
        base = server.url + f"/api/v1/workers/alice/runs/{events[-1]['runId']}"
        run = httpx.get(base, headers=auth).json()
        record = httpx.get(base + "/supervision", headers=auth).json()
    decision = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "supervisor_decision")
    assert decision["value"]["check"] == "tool_call_budget" and decision["value"]["action"] == "pause"
    assert events[-1]["result"]["outcome"] == "budget_exceeded"
    # the run record: budget_exceeded (not failed), its error naming the supervisor's gate
    assert run["state"] == "budget_exceeded" and run["error"]["code"] == "budget_exceeded"
    assert "paused by supervisor 'budget' (tool_call_budget)" in run["error"]["message"]
    assert record["state"] == "paused"  # the supervisor's own state, beside the run's


def test_a_model_comment_cites_its_step_streams_is_kept_and_asks_for_review(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    policy(
        workspace,
        "reviewer",
        {"attach": {"all": True}, "model": {"enabled": True, "events": ["final"], "max_calls": 1}},
    )
    comment = {"concern": "no_evidence", "text": "The answer names a shop the note does not.", "cites": ["c1", "nope"]}
    model_server.expect(
        Reply("Reading.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)),
        Reply("Buy milk at the corner shop."),
        Reply(
            json.dumps(
                {"comments": [{**comment, "attention": True}, {"concern": "ambiguity", "text": "x", "cites": []}]}
            )
        ),
    )
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "What does my note say?"})
        run_id = events[-1]["runId"]
        view = httpx.get(
            server.url + f"/api/v1/workers/alice/dashboard/runs/{run_id}",
            headers={"Authorization": f"Bearer {api_key}"},
        )
    for event in events:
        AGUI.validate_python(event)  # valid per the AG-UI models
    customs = [e for e in events if e["type"] == "CUSTOM" and e["name"] == "supervisor_comment"]
    assert len(customs) == 1  # the comment citing nothing shown was dropped
    value = customs[0]["value"]
    assert value["cites"] == ["c1"] and value["check"] == "model:no_evidence" and value["action"] == "request_review"
    assert events.index(customs[0]) < len(events) - 1 and events[-1]["result"]["outcome"] == "completed"
    confirmation = ConfirmationStore(workspace).get("acme", "alice", value["confirmation_id"])
    assert confirmation is not None and confirmation.kind == "review" and confirmation.run_id == run_id
    assert view.status_code == 200, view.text
    kept = view.json()["supervision"]
    assert kept["state"] == "attention_required" and kept["decisions"][0]["cites"] == ["c1"]
    assert kept["model_review"]["calls"] == 1


def test_a_paused_run_is_resumed_where_it_stopped_by_approving_its_confirmation(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    policy(workspace, "careful", {"attach": {"all": True}, "tools": ["memory_*"], "on_violation": "pause"})
    model_server.expect(
        Reply("Reading.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)),
        Reply("I may not read files here; ask me something else."),
    )
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    with serve(tmp_path, workspace, model_server) as server:
        base = server.url + "/api/v1/workers/alice"
        events = chat(server, api_key, {"worker_id": "alice", "message": "What does my note say?"})
        run_id = events[-1]["runId"]
        paused = httpx.get(base + f"/runs/{run_id}", headers=auth).json()
        pending = httpx.get(base + "/confirmations", headers=auth).json()["confirmations"]
        (confirmation,) = [c for c in pending if c["run_id"] == run_id]
        approved = httpx.post(base + f"/confirmations/{confirmation['confirmation_id']}/approve", headers=auth)
        after = httpx.get(base + f"/runs/{run_id}", headers=auth).json()
    assert events[-1]["result"]["outcome"] == "supervisor_paused"
    assert paused["state"] == "paused" and confirmation["kind"] == "pause"
    assert "paused by supervisor 'careful' (tool_allow_list)" in confirmation["reasons"][0]
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["run"]["state"] == "completed" and body["output"].startswith("I may not read files")
    assert after["state"] == "superseded"  # the paused run hands over to its continuation
    # resumed in place: the model saw the conversation up to the pause, the refused call included
    resumed = json.dumps(model_server.requests[-1]["messages"])
    assert "refused by supervisor 'careful'" in resumed and "What does my note say?" in resumed


def test_rejecting_a_paused_runs_confirmation_cancels_it(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    policy(workspace, "careful", {"attach": {"all": True}, "tools": ["memory_*"], "on_violation": "pause"})
    model_server.expect(Reply("Reading.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)))
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    with serve(tmp_path, workspace, model_server) as server:
        base = server.url + "/api/v1/workers/alice"
        run_id = chat(server, api_key, {"worker_id": "alice", "message": "What does my note say?"})[-1]["runId"]
        (confirmation,) = httpx.get(base + "/confirmations", headers=auth).json()["confirmations"]
        rejected = httpx.post(base + f"/confirmations/{confirmation['confirmation_id']}/reject", headers=auth)
        after = httpx.get(base + f"/runs/{run_id}", headers=auth).json()
    assert rejected.status_code == 200 and confirmation["kind"] == "pause"
    assert after["state"] == "cancelled"  # nothing runs again; the model was asked once
