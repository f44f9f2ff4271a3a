"""Upstream goal fields that act at run time (issue #22): a goal's `default_pre_script` runs before
the work it starts, and a completed goal with `on_complete: create_duty` yields a suggestion whose
approval writes a duty the loader accepts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.worker.router import RouteDone, RouteRequest
from genworker.workspace.registry import WorkspaceRegistry

ACTIVE = (
    "---\ngoal_id: audit\ntitle: Audit the mart\nmilestones:\n  - id: m\n    title: List\n    tasks:\n"
    "      - {id: t, title: Export the list, status: in_progress}\n"
    "default_pre_script: {source: 'echo goal-numbers-7', language: bash, timeout_seconds: 30}\n---\n"
)
DONE = (
    "---\ngoal_id: sla\ntitle: Restore the SLA\nstatus: completed\non_complete: create_duty\nmilestones:\n"
    "  - id: m\n    title: Fix\n    status: completed\n    tasks:\n      - {id: t, title: Fix it, status: completed}\n"
    "---\n"
)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    with TestClient(create_app(load_settings(tmp_path / "configs", scripted_env(model), workspace=workspace))) as c:
        yield c, c.app.state.runtime  # type: ignore[attr-defined]


def test_a_goals_default_pre_script_feeds_the_work_it_starts(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/goals/audit.md": ACTIVE})

    def sees_script_output(body: dict[str, Any]) -> None:
        assert "goal-numbers-7" in body["messages"][-1]["content"]

    model_server.expect(Reply("Exported.", check=sees_script_output))
    with running(tmp_path, workspace, model_server) as (client, runtime):

        async def run() -> Any:
            request = RouteRequest("acme", "alice", "Export the list", "task", goal_id="audit", conversational=False)
            return [e async for e in runtime.services.router.route_stream(request)][-1]

        done = client.portal.call(run)  # type: ignore[union-attr]
    assert isinstance(done, RouteDone) and done.result.output == "Exported."


def test_a_completed_goal_asks_for_a_duty_that_keeps_its_result(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/goals/sla.md": DONE})
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    base = "/api/v1/workers/alice"
    with running(tmp_path, workspace, model_server) as (client, _):
        created = client.post(f"{base}/suggestions/detect", headers=headers).json()["created"]
        (suggestion,) = [s for s in created if s["source"] == "goal_on_complete"]
        assert suggestion["kind"] == "duty" and suggestion["payload"]["duty_id"] == "keep-sla"
        approved = client.post(f"{base}/suggestions/{suggestion['suggestion_id']}/approve", headers=headers)
        assert approved.status_code == 200
        assert approved.json()["suggestion"]["result"] == "tenants/acme/workers/alice/duties/keep-sla.md"
    registry = WorkspaceRegistry(workspace, product_skills=None)
    registry.load_all()
    assert [i for i in registry.issues() if i.severity == "error"] == []
    duty = registry.worker("acme", "alice").duties["keep-sla"]  # type: ignore[union-attr]
    assert (duty.title, duty.posture.default, [t.type for t in duty.triggers]) == (
        "Keep: Restore the SLA",
        "propose",
        ["manual"],
    )
