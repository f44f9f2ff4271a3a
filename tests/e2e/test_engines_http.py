"""Planning and LangGraph end to end over HTTP: the real server, LiteLLM to the scripted model server,
real files. The LangGraph skill is the demo's reply_drafting (draft -> review loop -> a person
approves through interrupt() -> the draft is filed): approved over the API, and, after its server
process was SIGKILLed mid-graph and the run continued from its checkpoint, over a Slack slash command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from genworker.auth import ApiKeyStore
from genworker.testing import Hang, Reply, ScriptedModelServer, ToolCallReply, When
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer, serve
from genworker.testing.vendors import Vendor

GRAPH_SKILL = Path("tenants", "demo", "workers", "assistant", "skills", "reply_drafting")
TASK = "Reply for approval: Priya asks to move the board deck review to Friday."

SERVER = """
import sys
from pathlib import Path
from genworker.api.app import create_app
from genworker.settings import load_settings
from genworker.testing.live_server import LiveServer

configs, workspace, model = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
env = {
    "GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model, "GENWORKER_LLM_API_KEY": "k",
    "GENWORKER_HOT_RELOAD": "false", "GENWORKER_HEARTBEAT_ENABLED": "false",
}
configs.mkdir(exist_ok=True)
with LiveServer(create_app(load_settings(configs, env, workspace=workspace))) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""

PERSONA = """---
identity: {name: Iris, worker_id: assistant}
channels:
  - {type: slack}
contacts:
  - person_id: dana
    name: Dana Kim
    tags: [owner]
    identities: [{channel: slack, handle: U_DANA}]
---
You are Iris.
"""


def events_of(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def task(url: str, key: str, worker: str, text: str, skill: str) -> list[dict[str, Any]]:
    body = {"worker_id": worker, "task": text, "skill_id": skill}
    response = httpx.post(f"{url}/api/v1/worker/task/stream", json=body, headers=auth(key), timeout=120)
    assert response.status_code == 200, response.text
    return events_of(response)


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def steps(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    kinds = {"STEP_STARTED": "started", "STEP_FINISHED": "finished"}
    return [(e["stepName"], kinds[e["type"]]) for e in events if e["type"] in kinds]


def sees(*texts: str) -> Callable[[dict[str, Any]], None]:
    def check(body: dict[str, Any]) -> None:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        assert all(t in sent for t in texts), f"the model was not shown {[t for t in texts if t not in sent]}"

    return check


# -- planning ------------------------------------------------------------------------


def test_a_plan_with_parallel_branches_and_a_replan(
    tmp_path: Path, demo_workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(demo_workspace).create("demo")[1]
    first = {
        "nodes": [
            {"id": "signups", "instruction": "Weekly signups", "tools": ["file_read"]},
            {"id": "changes", "instruction": "Changes that week", "tools": ["file_search"]},
            {"id": "answer", "instruction": "Explain the drop", "depends_on": ["signups", "changes"]},
        ]
    }
    second = {
        "nodes": [
            {"id": "changelog", "instruction": "Read the change log", "tools": ["file_read"]},
            {"id": "answer2", "instruction": "Explain the drop", "depends_on": ["signups", "changelog"]},
        ]
    }
    read = ToolCallReply("file_read", {"path": "data/warehouse/weekly_metrics.csv"})
    model_server.expect(
        Reply(json.dumps(first), check=sees("Break the task into a plan", "file_read", "file_search")),
        When("Your step: signups", Reply(tool_calls=(read,)), meet="Your step: changes"),
        When("Your step: changes", Reply("STEP FAILED: no index of changes by week"), meet="Your step: signups"),
        When("Your step: signups", Reply("Signups: 4,380 (week of 2026-11-30), 5,120 the week before.")),
        Reply(json.dumps(second), check=sees("changes: no index of changes by week")),
        When("Your step: changelog", Reply("2026-11-27: the US paid search campaign ended.")),
        When("Your step: answer2", Reply("Signups fell 14.5% after the US campaign ended.", check=sees("4,380"))),
    )
    with serve(tmp_path, demo_workspace, model_server) as server:
        events = task(server.url, key, "analyst", "Deep dive: why did signups drop?", "metrics-deep-dive")
        run_id = events[0]["runId"]
        run = httpx.get(f"{server.url}/api/v1/workers/analyst/runs/{run_id}", headers=auth(key), timeout=30).json()
        board = httpx.get(f"{server.url}/api/v1/workers/analyst/dashboard", headers=auth(key), timeout=30).json()
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["result"] == {"outcome": "completed", "output": "Signups fell 14.5% after the US campaign ended."}
    assert ("plan", "finished") in steps(events) and ("replan-2", "finished") in steps(events)
    assert steps(events)[-1] == ("answer2", "finished")
    assert (run["state"], run["engine"]) == ("completed", "planning")
    plan = run["plan"]
    assert (plan["status"], plan["revision"], plan["replans"]) == ("completed", 2, 1)
    assert {n["id"]: n["state"] for n in plan["nodes"]} == {
        "signups": "completed", "changes": "failed", "answer": "skipped", "changelog": "completed",
        "answer2": "completed",
    }  # fmt: skip
    assert [c["name"] for c in run["tool_calls"]] == ["file_read"]
    [shown] = [r for r in board["blocks"]["runs"]["data"]["runs"] if r["run_id"] == run_id]
    assert shown["plan"]["replans"] == 1 and [n["state"] for n in shown["plan"]["nodes"]] == [
        "completed", "failed", "skipped", "completed", "completed",
    ]  # fmt: skip
    assert "2026-11-30,signups,4380" in json.dumps(model_server.requests[3]["messages"])  # the tool's result


# -- LangGraph -------------------------------------------------------------------------


@pytest.fixture
def graph_workspace(small_workspace: Callable[..., Path], demo_workspace_src: Path) -> Path:
    """Tenant demo (trust 2), worker assistant with the demo's reply_drafting skill and a Slack binding."""
    workspace = small_workspace(
        {"demo": ["assistant"]},
        {
            "tenants/demo/workers/assistant/PERSONA.md": PERSONA,
            "tenants/demo/workers/assistant/CHANNEL_CREDENTIALS.json": json.dumps(
                {"slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SIGNING_SECRET}}
            ),
        },
    )
    skills = workspace / "tenants" / "demo" / "workers" / "assistant" / "skills"
    skills.mkdir(parents=True)
    shutil.copytree(demo_workspace_src / GRAPH_SKILL, skills / "reply_drafting")
    return workspace


def test_a_graph_loops_interrupts_and_an_approval_over_the_api_resumes_it(
    tmp_path: Path, graph_workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(graph_workspace).create("demo")[1]
    model_server.expect(
        Reply("Hi Priya, Friday works.", check=sees("Write the reply", TASK)),
        Reply("REVISE: say which Friday.", check=sees("Review the draft reply", "Hi Priya, Friday works.")),
        Reply("Hi Priya, Friday 12 December works.", check=sees("Reviewer's notes", "say which Friday")),
        Reply("OK"),
    )
    with serve(tmp_path, graph_workspace, model_server) as server:
        events = task(server.url, key, "assistant", TASK, "reply_drafting")
        run_id = events[0]["runId"]
        base = f"{server.url}/api/v1/workers/assistant"
        waiting = httpx.get(f"{base}/runs/{run_id}", headers=auth(key), timeout=30).json()
        [pending] = httpx.get(f"{base}/confirmations", headers=auth(key), timeout=30).json()["confirmations"]
        decided = httpx.post(
            f"{base}/confirmations/{pending['confirmation_id']}/approve", headers=auth(key), timeout=120
        )
        assert decided.status_code == 200, decided.text
        after = httpx.get(f"{base}/runs/{decided.json()['run']['run_id']}", headers=auth(key), timeout=30).json()
    assert events[-1]["result"]["outcome"] == "approval_required"
    assert [s for s, kind in steps(events) if kind == "finished"] == ["draft", "review", "draft", "review"]
    approval = next(e for e in events if e["type"] == "CUSTOM" and e["name"] == "approval_required")
    assert approval["value"]["tool"] == "langgraph.interrupt" and approval["value"]["reason"] == "Send this reply?"
    assert (waiting["state"], waiting["engine"]) == ("waiting_approval", "langgraph")
    assert waiting["graph"]["status"] == "interrupted" and waiting["graph"]["thread"] == run_id
    assert waiting["graph"]["interrupt"]["draft"] == "Hi Priya, Friday 12 December works."
    assert pending["kind"] == "interrupt"
    assert decided.json()["output"] == (
        f"Approved and filed as files/drafts/approved/{run_id}.md:\n\nHi Priya, Friday 12 December works."
    )
    assert (
        after["state"] == "completed"
        and after["graph"]["thread"] == run_id
        and after["graph"]["steps"]
        == [
            "approve",
            "file",
        ]
    )
    filed = graph_workspace / "tenants/demo/workers/assistant/files/drafts/approved" / f"{run_id}.md"
    assert filed.read_text(encoding="utf-8") == "Hi Priya, Friday 12 December works."
    assert len(model_server.requests) == 4  # the resumed graph made no model call again
    checkpoints = graph_workspace / "tenants/demo/workers/assistant/runtime/graphs" / run_id / "root"
    assert len(list(checkpoints.glob("*.json"))) >= 6  # input, each step, the interrupt, the resume


class Server:
    """One server process on the workspace (killed with SIGKILL mid-graph)."""

    def __init__(self, tmp: Path, workspace: Path, model: ScriptedModelServer) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(tmp / "configs"), str(workspace), model.base_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            start_new_session=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://"), self.process.stderr.read() if self.process.stderr else ""

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate(timeout=30)


@pytest.fixture
def vendor() -> Iterator[Vendor]:
    stand_in = Vendor()
    with LiveServer(stand_in.app()) as live:
        stand_in.url = live.url  # type: ignore[attr-defined]
        yield stand_in


def slash(command: str, text: str, user: str) -> tuple[bytes, dict[str, str]]:
    ts = str(int(time.time()))
    form = f"command=%2F{command}&text={text}&user_id={user}&channel_id=D1&trigger_id=T1".encode()
    signature = SignatureVerifier(SLACK_SIGNING_SECRET).generate_signature(timestamp=ts, body=form)
    return form, {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
        "Content-Type": "application/x-www-form-urlencoded",
    }


def test_a_graph_killed_mid_run_continues_from_its_checkpoint_and_an_im_command_approves_it(
    tmp_path: Path, graph_workspace: Path, model_server: ScriptedModelServer, vendor: Vendor
) -> None:
    key = ApiKeyStore(graph_workspace).create("demo")[1]
    model_server.expect(Reply("Hi Priya, Friday works."), Reply("REVISE: say which Friday."), Hang())
    first = Server(tmp_path / "first", graph_workspace, model_server)
    streamed: list[str] = []
    body = {"worker_id": "assistant", "task": TASK, "skill_id": "reply_drafting"}

    def post() -> None:
        try:
            with httpx.stream("POST", f"{first.url}/api/v1/worker/task/stream", json=body, headers=auth(key)) as r:
                streamed.extend(r.iter_lines())
        except httpx.HTTPError:
            pass  # the server is killed under the request

    client = threading.Thread(target=post, daemon=True)
    client.start()
    try:
        model_server.wait_for_requests(3)  # the loop's second draft is under way
    finally:
        first.kill()
    client.join(30)
    run_id = json.loads(next(line for line in streamed if line.startswith("data:"))[5:])["runId"]
    thread = graph_workspace / "tenants/demo/workers/assistant/runtime/graphs" / run_id

    model_server.expect(
        Reply("Hi Priya, Friday 12 December works.", check=sees("Reviewer's notes", "say which Friday")),
        Reply("OK"),
    )
    env = {"GENWORKER_SLACK_API_BASE": vendor.url}  # type: ignore[attr-defined]
    (tmp_path / "second").mkdir()
    with serve(tmp_path / "second", graph_workspace, model_server, **env) as server:
        base = f"{server.url}/api/v1/workers/assistant"
        killed = httpx.get(f"{base}/runs/{run_id}", headers=auth(key), timeout=30).json()
        assert thread.is_dir() and killed["state"] == "interrupted"
        continued = httpx.post(f"{base}/runs/{run_id}/continue", headers=auth(key), timeout=120)
        assert continued.status_code == 200, continued.text
        again = httpx.post(f"{base}/runs/{run_id}/continue", headers=auth(key), timeout=120)
        second_id = continued.json()["run"]["run_id"]
        [pending] = httpx.get(f"{base}/confirmations", headers=auth(key), timeout=30).json()["confirmations"]
        form, headers = slash("approve_confirmation", pending["confirmation_id"], "U_DANA")
        url = f"{server.url}/api/v1/channel/demo~assistant~slack/slash"
        assert httpx.post(url, content=form, headers=headers, timeout=30).status_code == 200
        [reply] = vendor.wait_for("/chat.postMessage", 1)
        decided = httpx.get(f"{base}/confirmations/{pending['confirmation_id']}", headers=auth(key), timeout=30).json()
        runs = httpx.get(f"{base}/runs", headers=auth(key), timeout=30).json()["runs"]
    assert killed["graph"]["thread"] == run_id
    assert continued.json()["run"]["state"] == "waiting_approval"
    assert again.json()["run"]["run_id"] == second_id  # one continuation per interrupted run
    second = next(r for r in runs if r["run_id"] == second_id)
    assert second["state"] == "superseded"
    assert decided["status"] == "approved" and "U_DANA" in decided["decided_by"]
    assert reply.body["text"] == f"Confirmation {pending['confirmation_id']} approved."
    final = [r for r in runs if r["state"] == "completed"]
    assert len(final) == 1
    filed = graph_workspace / "tenants/demo/workers/assistant/files/drafts/approved" / f"{run_id}.md"
    assert filed.read_text(encoding="utf-8") == "Hi Priya, Friday 12 December works."
    assert len(model_server.requests) == 5  # draft, review, (killed draft), then draft and review once more


def test_rejecting_a_graph_interrupt_continues_the_graph_with_the_answer(
    tmp_path: Path, graph_workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(graph_workspace).create("demo")[1]
    model_server.expect(Reply("Hi Priya, Friday 12 December works."), Reply("OK"))
    with serve(tmp_path, graph_workspace, model_server) as server:
        events = task(server.url, key, "assistant", TASK, "reply_drafting")
        base = f"{server.url}/api/v1/workers/assistant"
        [pending] = httpx.get(f"{base}/confirmations", headers=auth(key), timeout=30).json()["confirmations"]
        decided = httpx.post(
            f"{base}/confirmations/{pending['confirmation_id']}/reject", headers=auth(key), timeout=120
        )
        runs = httpx.get(f"{base}/runs", headers=auth(key), timeout=30).json()["runs"]
        [after] = [
            httpx.get(f"{base}/runs/{r['run_id']}", headers=auth(key), timeout=30).json()
            for r in runs
            if r["run_id"] != events[0]["runId"]
        ]
    assert events[-1]["result"]["outcome"] == "approval_required" and decided.status_code == 200
    assert after["deliverables"][0]["content"] == "Not filed: the draft was rejected."
    assert after["graph"]["steps"] == ["approve", "file"]
    states = {r["run_id"]: r["state"] for r in runs}
    assert states[events[0]["runId"]] == "superseded"
    [continued] = [r for r in runs if r["run_id"] != events[0]["runId"]]
    assert continued["state"] == "completed"
    assert not (graph_workspace / "tenants/demo/workers/assistant/files/drafts").exists()
