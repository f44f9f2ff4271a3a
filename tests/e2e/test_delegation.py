"""Delegation over real HTTP: uvicorn, LiteLLM to the scripted model calling delegate_to_worker,
spawn_task and spawn_subagents.

A delegation runs as a child run of the other worker, bound to its duty's collaboration trigger, and
both records link parent and child (GET run shows the children). A worker whose policy denies the
delegate tools cannot delegate; one whose policy asks for approval gets a confirmation, and the
approved call starts its child once. Another tenant's worker cannot be named. The depth and fan-out
bounds hold."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import RunRef

DATA_REQUEST = (
    "---\nduty_id: data-request\ntitle: Answer data requests\ntriggers:\n"
    "  - {id: from-lead, type: collaboration, from_workers: [lead], request_type: data_request}\n"
    "---\nAnswer the data question with the number and its source.\n"
)


def persona(worker_id: str, mode: str = "personal", extra: str = "") -> str:
    return (
        f"---\nidentity: {{name: {worker_id.title()}, worker_id: {worker_id}}}\nmode: {mode}\n{extra}---\n"
        f"You are {worker_id}.\n"
    )


@dataclass
class Setup:
    workspace: Path
    http: httpx.Client
    stop: Callable[[], None]

    def chat(self, worker_id: str, message: str) -> list[dict[str, Any]]:
        with self.http.stream("POST", "/api/v1/chat/stream", json={"worker_id": worker_id, "message": message}) as r:
            assert r.status_code == 200, r.read()
            return [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]

    def run(self, worker_id: str, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/v1/workers/{worker_id}/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def runs(self, worker_id: str) -> list[dict[str, Any]]:
        return list(self.http.get(f"/api/v1/workers/{worker_id}/runs").json()["runs"])


@pytest.fixture
def setup(
    tmp_path: Path, write_tree: Callable[..., Path], model_server: ScriptedModelServer
) -> Iterator[Callable[..., Setup]]:
    opened: list[Callable[[], None]] = []

    def start(*, lead: str = "", trust: int = 2, **env: str) -> Setup:
        workspace = write_tree(
            {
                "tenants/acme/TENANT.json": json.dumps({"tenant_id": "acme", "trust_level": trust}),
                "tenants/acme/workers/lead/PERSONA.md": persona("lead", extra=lead),
                "tenants/acme/workers/analyst/PERSONA.md": persona("analyst", "team_member"),
                "tenants/acme/workers/analyst/duties/data-request.md": DATA_REQUEST,
                "tenants/globex/TENANT.json": json.dumps({"tenant_id": "globex", "trust_level": 2}),
                "tenants/globex/workers/bob/PERSONA.md": persona("bob"),
            }
        )
        (tmp_path / "configs").mkdir(exist_ok=True)
        app = create_app(load_settings(tmp_path / "configs", scripted_env(model_server, **env), workspace=workspace))
        live = LiveServer(app).__enter__()
        stopped: list[bool] = []

        def stop() -> None:
            if not stopped:
                stopped.append(True)
                live.__exit__(None, None, None)

        opened.append(stop)
        key = ApiKeyStore(workspace).create("acme")[1]
        http = httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        opened.append(http.close)
        return Setup(workspace, http, stop)

    yield start
    for close in reversed(opened):
        close()


def call(name: str, call_id: str = "c1", **arguments: Any) -> Reply:
    return Reply(tool_calls=(ToolCallReply(name, arguments, call_id),))


def tool_result(body: dict[str, Any]) -> str:
    return str([m for m in body["messages"] if m.get("role") == "tool"][-1]["content"])


def system_prompt(body: dict[str, Any]) -> str:
    return str(body["messages"][0]["content"])


def run_id_of(events: list[dict[str, Any]]) -> str:
    return str(events[0]["runId"])


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools", ())}


def test_a_delegation_is_a_child_run_of_the_colleague_visible_from_the_parent(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def is_the_analyst(body: dict[str, Any]) -> None:
        assert "You are Analyst" in system_prompt(body) and "data-request" in system_prompt(body)
        assert body["messages"][-1]["content"] == "How many signups in Q1?"

    model_server.expect(
        call("delegate_to_worker", worker_id="analyst", task="How many signups in Q1?", request_type="data_request"),
        Reply("1,234 signups (warehouse, Q1).", check=is_the_analyst),
        Reply("Analyst says 1,234.", check=lambda body: "1,234 signups (warehouse, Q1)." in tool_result(body)),
    )
    s = setup()
    events = s.chat("lead", "Ask the analyst for Q1 signups.")
    assert events[-1]["type"] == "RUN_FINISHED"
    parent = s.run("lead", run_id_of(events))
    [child_link] = parent["children"]
    assert child_link["worker_id"] == "analyst"
    assert [(c["name"], c["outcome"]) for c in parent["tool_calls"]] == [("delegate_to_worker", "completed")]
    child = s.run("analyst", child_link["run_id"])
    p = child["provenance"]
    assert (p["parent_run_id"], p["parent_worker_id"], p["delegation_depth"]) == (parent["run_id"], "lead", 1)
    assert (p["source_type"], p["source_id"], p["duty_id"], p["trigger_id"]) == (
        "collaboration", "lead", "data-request", "from-lead"
    )  # fmt: skip
    assert child["state"] == "completed" and child["deliverables"][0]["content"] == "1,234 signups (warehouse, Q1)."


def test_a_request_type_no_collaboration_trigger_accepts_is_refused(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("delegate_to_worker", worker_id="analyst", task="Fix the printer.", request_type="it_support"),
        Reply(
            "Cannot.",
            check=lambda body: (
                "accepts no request_type 'it_support' from you; it accepts: data_request" in tool_result(body)
            ),
        ),
    )
    s = setup()
    s.chat("lead", "Ask the analyst to fix the printer.")
    assert s.runs("analyst") == []


def test_another_tenants_worker_cannot_be_delegated_to(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("delegate_to_worker", worker_id="bob", task="Send me globex's customer list."),
        Reply("No.", check=lambda body: "'bob' is not one of your colleagues; they are: analyst" in tool_result(body)),
        call("delegate_to_worker", call_id="c2", worker_id="globex/bob", task="Send me the customer list."),
        Reply("No.", check=lambda body: "'globex/bob' is not a worker id" in tool_result(body)),
    )
    s = setup()
    s.chat("lead", "Ask bob at globex.")
    s.chat("lead", "Try globex/bob.")
    globex = ApiKeyStore(s.workspace).create("globex")[1]
    bobs = s.http.get("/api/v1/workers/bob/runs", headers={"Authorization": f"Bearer {globex}"})
    assert bobs.status_code == 200 and bobs.json()["runs"] == []
    runs = s.runs("lead")
    assert len(runs) == 2 and all(s.run("lead", r["run_id"])["children"] == [] for r in runs)


def test_a_worker_whose_policy_denies_delegation_cannot_delegate(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    def not_offered(body: dict[str, Any]) -> None:
        assert offered(body) and not offered(body) & {"delegate_to_worker", "spawn_task", "spawn_subagents"}

    model_server.expect(
        Reply(tool_calls=(ToolCallReply("delegate_to_worker", {"worker_id": "analyst", "task": "x"}, "c1"),),
              check=not_offered),
        Reply("I may not.", check=lambda body: "is in worker lead's denied_tools" in tool_result(body)),
    )  # fmt: skip
    s = setup(lead="tool_policy: {denied_tools: [delegate_to_worker, spawn_task, spawn_subagents]}\n")
    events = s.chat("lead", "Ask the analyst.")
    run = s.run("lead", run_id_of(events))
    assert [(c["name"], c["outcome"]) for c in run["tool_calls"]] == [("delegate_to_worker", "denied")]
    assert run["children"] == [] and s.runs("analyst") == []


def test_a_tenant_below_trust_two_cannot_delegate(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("spawn_task", task="Summarise the inbox."),
        Reply("I may not.", check=lambda body: "(delegate) needs trust level 2; tenant has 1" in tool_result(body)),
    )
    s = setup(trust=1)
    events = s.chat("lead", "Spawn a task.")
    assert s.run("lead", run_id_of(events))["children"] == []


def test_delegation_the_policy_asks_approval_for_waits_for_a_person_and_starts_its_child_once(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("delegate_to_worker", call_id="c-ok", worker_id="analyst", task="Q1 churn?", request_type="data_request"),
        Reply("2.1 %."),  # the analyst, once approved
        Reply("Churn was 2.1 %.", check=lambda body: "2.1 %." in tool_result(body)),
    )
    s = setup(lead="tool_effect_overrides: {delegate_to_worker: {requires_approval: true}}\n")
    events = s.chat("lead", "Ask the analyst for Q1 churn.")
    assert any(e["type"] == "CUSTOM" and e["name"] == "approval_required" for e in events)
    assert s.runs("analyst") == []
    [pending] = s.http.get("/api/v1/workers/lead/confirmations?status=pending").json()["confirmations"]
    assert pending["tool_call"]["name"] == "delegate_to_worker"
    approved = s.http.post(f"/api/v1/workers/lead/confirmations/{pending['confirmation_id']}/approve")
    assert approved.status_code == 200 and approved.json()["output"] == "Churn was 2.1 %."
    [child] = s.runs("analyst")
    [link] = s.run("lead", run_id_of(events))["children"]
    assert link["run_id"] == child["run_id"]
    again = s.http.post(f"/api/v1/workers/lead/confirmations/{pending['confirmation_id']}/approve")
    assert again.status_code == 409 and len(s.runs("analyst")) == 1


def test_delegation_depth_is_bounded(setup: Callable[..., Setup], model_server: ScriptedModelServer) -> None:
    model_server.expect(
        call("delegate_to_worker", worker_id="analyst", task="Q1 signups?", request_type="data_request"),
        call("delegate_to_worker", call_id="c2", worker_id="lead", task="Ask someone else."),  # the analyst, depth 1
        Reply("1,234.", check=lambda body: "may be delegated at most 1 levels deep" in tool_result(body)),
        Reply("1,234 it is."),
    )
    s = setup(GENWORKER_DELEGATION_MAX_DEPTH="1")
    events = s.chat("lead", "Ask the analyst.")
    [link] = s.run("lead", run_id_of(events))["children"]
    child = s.run("analyst", link["run_id"])
    assert child["children"] == [] and [c["outcome"] for c in child["tool_calls"]] == ["failed"]
    assert len(s.runs("lead")) == 1  # no grandchild


def test_fan_out_is_bounded_and_subagents_run_as_children(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        call("spawn_subagents", tasks=["north", "south", "east"]),
        call("spawn_subagents", call_id="c2", tasks=["north", "south"]),
        Reply("done"),  # the two subagents, in either order
        Reply("done"),
        call("spawn_task", call_id="c3", task="west"),
        Reply("All regions covered.", check=lambda body: "may start at most 2 child runs" in tool_result(body)),
    )
    s = setup(GENWORKER_DELEGATION_MAX_CHILDREN="2")
    events = s.chat("lead", "Cover every region.")
    parent = s.run("lead", run_id_of(events))
    assert [(c["name"], c["outcome"]) for c in parent["tool_calls"]] == [
        ("spawn_subagents", "failed"), ("spawn_subagents", "completed"), ("spawn_task", "failed")
    ]  # fmt: skip
    assert len(parent["children"]) == 2 and {c["worker_id"] for c in parent["children"]} == {"lead"}
    for link in parent["children"]:
        child = s.run("lead", link["run_id"])
        assert child["state"] == "completed" and child["provenance"]["parent_run_id"] == parent["run_id"]


def test_spawn_task_returns_at_once_and_its_child_finishes_on_its_own(
    setup: Callable[..., Setup], model_server: ScriptedModelServer
) -> None:
    model_server.expect(call("spawn_task", task="Tidy the notes."), Reply("ok"), Reply("ok"))  # parent and child
    s = setup()
    events = s.chat("lead", "Tidy the notes in the background.")
    [link] = s.run("lead", run_id_of(events))["children"]
    assert "started" in events_text(events, "TOOL_CALL_RESULT")
    model_server.wait_for_requests(3)
    s.stop()  # the runtime waits for its background runs before it stops
    child = asyncio.run(TaskLifecycle(s.workspace).get_run(RunRef("acme", "lead", link["run_id"])))
    assert child.state.value == "completed" and child.provenance.parent_run_id == run_id_of(events)


def events_text(events: list[dict[str, Any]], kind: str) -> str:
    return " ".join(str(e.get("content", "")) for e in events if e["type"] == kind)
