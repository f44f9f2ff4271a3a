"""The Supervisor over real HTTP with the scripted model (issue #33): a policy's tool allow-list stops
a run; the model reviewer's comment cites the step, streams as an AG-UI CUSTOM event, is kept with the
run (and shown in its run view) and its request for attention becomes a confirmation."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import pytest
from tests.e2e.test_chat_api import chat, key, serve

from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.worker.confirmations.store import ConfirmationStore


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    ws = small_workspace({"acme": ["alice"]})
    files = ws / "tenants/acme/workers/alice/files"
    files.mkdir()
    (files / "notes.md").write_text("buy milk", encoding="utf-8")
    return ws


def policy(workspace: Path, name: str, body: dict[str, object]) -> None:
    folder = workspace / "tenants/acme/workers/alice/supervisors"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(body), encoding="utf-8")


def test_a_tool_outside_the_allow_list_stops_the_run(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    policy(workspace, "strict", {"attach": {"all": True}, "tools": ["memory_*"]})
    model_server.expect(Reply("Reading.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)))
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, key(workspace, "acme"), {"worker_id": "alice", "message": "What does my note say?"})
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "refused by supervisor 'strict'" in result["content"]
    decision = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "supervisor_decision")
    assert decision["value"]["check"] == "tool_allow_list" and decision["value"]["cites"] == ["c1"]
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED" and finished["result"]["outcome"] == "condition_stopped"
    run_id = finished["runId"]
    record = json.loads(
        (workspace / f"tenants/acme/workers/alice/runtime/supervision/{run_id}.json").read_text(encoding="utf-8")
    )
    assert record["state"] == "paused" and record["decisions"][0]["action"] == "stop"


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
