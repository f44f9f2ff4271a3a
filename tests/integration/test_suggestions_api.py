"""Suggestions end to end in the runtime: the detectors find a repeated request, a failing duty,
a finished goal and a confident learned rule; approving a skill suggestion writes a SKILL.md the
reloaded worker uses; the API and the IM command backend decide them once; feedback is recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.worker.router import RouteDone, RouteRequest

BROKEN = (
    "---\nduty_id: nightly\ntitle: Nightly export\ntriggers: [{id: m, type: manual}]\n"
    "pre_script: {inline: 'exit 3', language: bash}\n---\nExport.\n"
)
GOAL = (
    "---\ngoal_id: tidy\ntitle: Tidy the CRM\nmilestones:\n  - id: m\n    title: Clean\n    tasks:\n"
    "      - {id: dedupe, title: Dedupe contacts, status: done}\n---\nA clean CRM.\n"
)
RULE = "---\ntitle: Cite every number\nconfidence: 0.95\n---\nEvery number in a report names its source table.\n"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    files = {
        "tenants/acme/workers/alice/duties/nightly.md": BROKEN,
        "tenants/acme/workers/alice/goals/tidy.md": GOAL,
        "tenants/acme/workers/alice/rules/learned/cite-numbers.md": RULE,
    }
    return small_workspace({"acme": ["alice"]}, files)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def route(client: TestClient, runtime: Runtime, req: RouteRequest) -> str:
    async def run() -> str:
        events = [e async for e in runtime.services.router.route_stream(req)]
        assert isinstance(events[-1], RouteDone)
        return str(events[-1].record.state)

    return client.portal.call(run)  # type: ignore[union-attr]


def test_detectors_suggest_and_approval_applies(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("7 open"), Reply("3 open"), Reply("none open"))
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    base = "/api/v1/workers/alice"
    with running(tmp_path, workspace, model_server) as (client, runtime):
        for week in (10, 11, 12):
            req = RouteRequest("acme", "alice", f"Count the open tickets in queue {week}", conversational=False)
            assert route(client, runtime, req) == "completed"
        for _ in range(3):
            duty = RouteRequest(
                "acme", "alice", "Export", "duty", duty_id="nightly", trigger_id="m", conversational=False
            )
            assert route(client, runtime, duty) == "failed"
        created = client.post(f"{base}/suggestions/detect", headers=headers).json()["created"]
        by_source = {s["source"]: s for s in created}
        assert sorted(by_source) == ["duty_drift", "goal_completion", "repeated_task", "rule_crystallizer"]
        assert by_source["duty_drift"]["payload"]["errors"] == ["pre_script_failed"]
        assert client.post(f"{base}/suggestions/detect", headers=headers).json()["created"] == []  # once each

        skill = by_source["repeated_task"]
        skill_id = skill["payload"]["skill_id"]
        approved = client.post(f"{base}/suggestions/{skill['suggestion_id']}/approve", headers=headers)
        assert approved.status_code == 200
        assert approved.json()["suggestion"]["result"] == f"tenants/acme/workers/alice/skills/{skill_id}/SKILL.md"
        assert runtime.registry.reload_worker("acme", "alice").ok
        worker = runtime.registry.worker("acme", "alice")
        assert worker is not None and skill_id in worker.skills
        again = client.post(f"{base}/suggestions/{skill['suggestion_id']}/reject", headers=headers)
        assert again.status_code == 409

        backend = runtime.services.command_backend
        assert backend is not None
        pending = {s["id"]: s for s in backend.suggestions("acme", "alice")}
        goal_sid = by_source["goal_completion"]["suggestion_id"]
        assert pending[goal_sid]["kind"] == "goal_completion"
        assert backend.decide_suggestion("acme", "alice", goal_sid, "approve", "im:dana")["status"] == "approved"
        assert runtime.services.goals.get("acme", "alice", "tidy").status == "completed"
        drift_sid = by_source["duty_drift"]["suggestion_id"]
        assert backend.decide_suggestion("acme", "alice", drift_sid, "reject", "im:dana")["status"] == "rejected"
        with pytest.raises(ValueError):
            backend.decide_suggestion("acme", "alice", drift_sid, "approve", "im:dana")
        with pytest.raises(LookupError):
            backend.decide_suggestion("acme", "alice", "sg_0000000000000000", "approve", "im:dana")
        listed = client.get(f"{base}/suggestions", headers=headers).json()["suggestions"]
        assert [s["source"] for s in listed] == ["rule_crystallizer"]

        backend.feedback("acme", "alice", "The weekly summary is too long", "im:dana")
        posted = client.post(f"{base}/feedback", json={"text": "Use tables"}, headers=headers)
        assert posted.status_code == 201
        texts: list[Any] = [f["text"] for f in client.get(f"{base}/feedback", headers=headers).json()["feedback"]]
        assert texts == ["Use tables", "The weekly summary is too long"]
        assert client.post(f"{base}/feedback", json={"text": ""}, headers=headers).status_code == 422
        assert client.post(f"{base}/suggestions/sg_0000000000000000/approve", headers=headers).status_code == 404
        status = backend.status("acme", "alice")
        assert status["pending_suggestions"] == 1 and status["goals"] == []  # tidy is completed now
