"""Over real HTTP (uvicorn): a duty run gated by its contract waits; a person lists the waiting
confirmations, approves one and gets the finished run; the goal API answers on the same server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.testing.live_server import LiveServer

PAY = (
    "---\nduty_id: pay\ntitle: Pay invoices\ntriggers: [{id: m, type: manual}]\n"
    "contract: {version: '1', approval: {required: true}}\n---\nPay the approved invoices.\n"
)
GOAL = "---\ngoal_id: close-q1\ntitle: Close Q1 books\nstatus: pending_approval\n---\nBooks closed by April.\n"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    files = {"tenants/acme/workers/alice/duties/pay.md": PAY, "tenants/acme/workers/alice/goals/close-q1.md": GOAL}
    return small_workspace({"acme": ["alice"]}, files)


def test_a_person_approves_gated_work_and_a_goal_over_http(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("3 invoices paid"))
    configs = tmp_path / "configs"
    configs.mkdir()
    env = scripted_env(model_server)
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with (
        LiveServer(create_app(load_settings(configs, env, workspace=workspace))) as server,
        httpx.Client(base_url=server.url + "/api/v1/workers/alice", headers=headers, timeout=60) as http,
    ):
        waiting = http.post("/duties/pay/run").json()["run"]
        assert waiting["state"] == "waiting_approval"
        (pending,) = http.get("/confirmations", params={"status": "pending"}).json()["confirmations"]
        assert pending["run_id"] == waiting["run_id"] and pending["duty_id"] == "pay"
        approved = http.post(f"/confirmations/{pending['confirmation_id']}/approve")
        assert approved.status_code == 200
        assert approved.json()["run"]["state"] == "completed" and approved.json()["output"] == "3 invoices paid"
        assert http.get(f"/runs/{waiting['run_id']}").json()["state"] == "superseded"
        assert http.post(f"/confirmations/{pending['confirmation_id']}/reject").status_code == 409

        assert http.post("/goals/close-q1/approve").json()["goal"]["status"] == "active"
        (goal,) = http.get("/goals").json()["goals"]
        assert goal["status"] == "active" and goal["body"] == "Books closed by April."
    text = (workspace / "tenants/acme/workers/alice/goals/close-q1.md").read_text(encoding="utf-8")
    assert text == GOAL.replace("pending_approval", "active")
