"""A worker parks itself with the wait_for_event tool, over real HTTP (uvicorn, LiteLLM to the
scripted model): the run ends waiting (paused), an event with the match_key resumes the same
thread once with the event's payload, a second event resumes nothing, and bad arguments come
back to the model as a tool error."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, serve
from genworker.testing.live_server import LiveServer

KEY = "github:pr:42:merged"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"]})


def auth(workspace: Path) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme', None)[1]}"}


def chat(server: LiveServer, headers: dict[str, str], body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", server.url + "/api/v1/chat/stream", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200, r.read()
        return [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]


def get(server: LiveServer, path: str, headers: dict[str, str]) -> Any:
    response = httpx.get(server.url + path, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def wait_call(call_id: str = "c1", **arguments: Any) -> Reply:
    args = {"match_key": KEY, "reason": "the PR must be merged before I deploy", **arguments}
    return Reply("I will wait for the merge.", tool_calls=(ToolCallReply("wait_for_event", args, call_id),))


def test_a_run_waits_for_an_event_and_its_thread_continues_once(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    headers = auth(workspace)
    model_server.expect(wait_call(resume_instructions="deploy PR 42 to staging", timeout_s=3600))
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, headers, {"worker_id": "alice", "message": "Deploy PR 42 once it is merged."})
        thread_id = events[0]["threadId"]
        finished = events[-1]
        assert finished["type"] == "RUN_FINISHED" and finished["result"]["outcome"] == "waiting"
        text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
        assert f"Waiting for {KEY}: the PR must be merged before I deploy" in text
        [parked] = get(server, f"/api/v1/chat/{thread_id}/tasks", headers)["tasks"]
        assert parked["state"] == "paused"
        [plan] = get(server, "/api/v1/workers/alice/waiting?state=waiting", headers)["plans"]
        assert plan["match_key"] == KEY and plan["resume"]["thread_id"] == thread_id
        assert plan["resume"]["run_id"] == parked["run_id"]

        def sees_the_event(body: dict[str, Any]) -> None:
            contents = [str(m.get("content")) for m in body["messages"]]
            assert "Deploy PR 42 once it is merged." in contents  # the same thread's history
            assert any("Waiting for github:pr:42:merged" in c for c in contents)
            last = contents[-1]
            assert "github:pr:42:merged (event gh-1)" in last and "deploy PR 42 to staging" in last
            assert '"merged_by": "bob"' in last

        model_server.expect(Reply("Merged by bob; deployed to staging.", check=sees_the_event))
        event = {"match_key": KEY, "event_id": "gh-1", "payload": {"merged_by": "bob", "sha": "abc123"}}
        with ThreadPoolExecutor(2) as pool:  # the same event delivered twice at once
            posts = [
                pool.submit(
                    httpx.post, server.url + "/api/v1/waiting/events?wait=true", json=event, headers=headers, timeout=60
                )
                for _ in range(2)
            ]
            woken = [p.result().json()["woken"] for p in posts]
        assert sorted(len(w) for w in woken) == [0, 1]
        assert [p["state"] for w in woken for p in w] == ["done"]
        again = httpx.post(server.url + "/api/v1/waiting/events", json={**event, "event_id": "gh-2"}, headers=headers)
        assert again.json()["woken"] == []
        runs = {t["run_id"]: t["state"] for t in get(server, f"/api/v1/chat/{thread_id}/tasks", headers)["tasks"]}
        assert runs.pop(parked["run_id"]) == "superseded"
        assert list(runs.values()) == ["completed"]
    assert len(model_server.requests) == 2


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"match_key": "no spaces allowed"}, "match_key 'no spaces allowed' is not valid"),
        ({"timeout_s": 0}, "timeout_s=0 must be between 1 and"),
        ({"reason": "  "}, "reason must be 1-500 characters"),
    ],
)
def test_bad_arguments_are_a_tool_error_and_park_nothing(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, arguments: dict[str, Any], problem: str
) -> None:
    headers = auth(workspace)

    def sees_the_error(body: dict[str, Any]) -> None:
        tool = [m for m in body["messages"] if m.get("role") == "tool"]
        assert problem in tool[-1]["content"]

    model_server.expect(wait_call(**arguments), Reply("I cannot wait for that.", check=sees_the_error))
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, headers, {"worker_id": "alice", "message": "Deploy PR 42 once it is merged."})
        assert events[-1]["result"]["outcome"] == "completed"
        assert get(server, "/api/v1/workers/alice/waiting", headers)["plans"] == []
