"""A chat thread's runs keep their trace (genworker.streaming.trace) over the real app: the second turn's
context holds the first turn as history, and a worker credential the model put in a tool call's
arguments is masked in the timeline as the tool audit masks it, in the run view and in the file.
LiteLLM reaches the scripted model server over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.integration.test_dashboard_api import running

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply

SECRET = "fake-test-value-not-a-secret-7731"  # no well-known key shape: only the worker's own secrets mask it


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    credentials = {"slack": {"bot_token": "xoxb-test", "signing_secret": SECRET}}
    return small_workspace(
        {"acme": ["alice"]}, {"tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(credentials)}
    )


def chat(client: TestClient, key: str, text: str, thread: str | None = None) -> tuple[str, str]:
    """One chat turn; its (thread id, run id)."""
    body = {"worker_id": "alice", "message": text, **({"thread_id": thread} if thread else {})}
    answer = client.post("/api/v1/chat/stream", json=body, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.headers["X-Thread-Id"], answer.headers["X-Run-Id"]


def test_a_threads_second_turn_shows_its_history_and_a_secret_in_its_arguments_masked(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    leaky = ToolCallReply("file_read", {"path": f"notes/{SECRET}.md"}, "c1")
    model_server.expect(Reply("Hello, I am Alice."), Reply(tool_calls=(leaky,)), Reply("No such note."))
    with running(tmp_path, workspace, model_server) as client:
        thread, first = chat(client, key, "Hello")
        _, second = chat(client, key, "Read my note", thread)
        auth = {"Authorization": f"Bearer {key}"}
        view = client.get(f"/api/v1/workers/alice/dashboard/runs/{second}", headers=auth).json()
    model_server.assert_done()

    history = next(s for s in view["context"]["segments"] if s["name"] == "history")
    assert history["items"] == 2 and history["tokens"] > 0  # the first turn: the question and its answer
    traces = workspace / "tenants/acme/workers/alice/runtime/run_traces"
    assert sorted(p.name for p in traces.iterdir()) == sorted([f"{first}.json", f"{second}.json"])

    events = view["timeline"]["events"]
    args = next(e for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert args["summary"] == '{"path": "notes/[REDACTED].md"}'
    assert view["tool_calls"][0]["args"] == {"path": "notes/[REDACTED].md"}  # as the audit keeps it
    assert SECRET not in json.dumps(view)
    assert SECRET not in (traces / f"{second}.json").read_text(encoding="utf-8")
