"""Goals through the real runtime and the real file watcher: a finished duty run is judged and its
met verdict projected into its goal task, the progress check emits health events and an off-track
inbox item, the goal
API drives the GoalAggregate, and a goal edit reloads its worker once — never a loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.goals import (
    GOAL_EVALUATED,
    GOAL_HEALTH_CHANGED,
    GOAL_OFF_TRACK,
    GoalAggregate,
    GoalProgressChecker,
    GoalProgressProjector,
)
from genworker.bus import Event, InProcessEventBus
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent
from genworker.workspace.registry import ReloadOutcome, WorkspaceRegistry
from genworker.workspace.watcher import WorkspaceWatcher

TIMEOUT = 15.0

GOAL = """---
goal_id: launch
title: Launch the beta
deadline: 2027-03-01
milestones:
  - id: build
    title: Build it
    deadline: 2026-01-15   # already past: the goal is off track
    tasks:
      - id: api
        title: The API
        duty_id: dev
      - id: docs
        title: The docs
        blocked_by: [api]
---
The beta decides the Q2 budget.
"""
DUTY = "---\nduty_id: dev\ntitle: Develop\ntriggers: [{id: m, type: manual}]\n---\nBuild the next piece.\n"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    files = {"tenants/acme/workers/alice/goals/launch.md": GOAL, "tenants/acme/workers/alice/duties/dev.md": DUTY}
    return small_workspace({"acme": ["alice", "bob"]}, files)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def test_a_duty_run_is_projected_and_the_check_reports_the_goal_off_track(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    met = {"verdict": "met", "reasons": ["the API is built"], "evidence": ["output"]}
    model_server.expect(Reply("built"), Reply(tool_calls=(ToolCallReply("goal_verdict", met),)))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        router, goals, inbox, runtime_bus = (
            runtime.services.router,
            runtime.services.goals,
            runtime.services.inbox,
            runtime.services.bus,
        )
        bus = InProcessEventBus()
        seen: list[Event] = []

        async def record(event: Event) -> None:
            seen.append(event)

        async def scenario() -> None:
            evaluated = asyncio.Event()

            async def on_evaluated(event: Event) -> None:
                evaluated.set()

            runtime_bus.subscribe(GOAL_EVALUATED, on_evaluated)
            req = RouteRequest("acme", "alice", "Build", "duty", duty_id="dev", trigger_id="m", conversational=False)
            events: list[RouterEvent] = [e async for e in router.route_stream(req)]
            assert isinstance(events[-1], RouteDone) and events[-1].record.state == "completed"
            await asyncio.wait_for(evaluated.wait(), TIMEOUT)  # the runtime judged the run in the background
            subscription = bus.subscribe("goal.*", record)
            checker = GoalProgressChecker(
                goals,
                GoalProgressProjector(goals, router.tasks),
                bus=bus,
                inbox=inbox,
                clock=lambda: datetime(2026, 2, 1, tzinfo=UTC),
            )
            first = await checker.check_worker("acme", "alice")
            again = await checker.check_worker("acme", "alice")  # same health: no new event or item
            assert [h.health for h in first] == [h.health for h in again] == ["off_track"]
            await subscription.join()
            await bus.close()

        client.portal.call(scenario)  # type: ignore[union-attr]
        goal = goals.get("acme", "alice", "launch")
        assert {t.id: t.status for t in goal.tasks()} == {"api": "done", "docs": "pending"}
        assert goal.milestones[0].status == "in_progress"
        assert [e.topic for e in seen] == [GOAL_HEALTH_CHANGED]
        assert seen[0].payload["overdue_milestones"] == ("build",) and seen[0].payload["previous"] is None

        async def items() -> list[str]:
            return [i.event_type for i in await inbox.list("acme", "alice")]

        assert client.portal.call(items) == [GOAL_OFF_TRACK]  # type: ignore[union-attr]
    text = (workspace / "tenants/acme/workers/alice/goals/launch.md").read_text(encoding="utf-8")
    assert "deadline: 2026-01-15   # already past: the goal is off track" in text
    assert text.endswith("---\nThe beta decides the Q2 budget.\n")


def test_the_goal_api_drives_the_aggregate(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    base = "/api/v1/workers/alice/goals"
    with running(tmp_path, workspace, model_server) as (client, _):
        (listed,) = client.get(base, headers=headers).json()["goals"]
        assert listed["goal_id"] == "launch" and listed["health"]["health"] in ("off_track", "overdue", "at_risk")
        assert listed["body"] == "The beta decides the Q2 budget."
        paused = client.post(f"{base}/launch/pause", headers=headers).json()
        assert paused["changed"] and paused["goal"]["status"] == "paused"
        assert client.post(f"{base}/launch/pause", headers=headers).json()["changed"] is False
        refused = client.post(f"{base}/launch/reject", headers=headers)
        assert refused.status_code == 409 and "is paused" in refused.json()["error"]["message"]
        client.post(f"{base}/launch/resume", headers=headers)
        done = client.post(f"{base}/launch/tasks/api", json={"status": "done"}, headers=headers).json()
        assert {t["id"]: t["status"] for t in done["goal"]["milestones"][0]["tasks"]} == {
            "api": "done",
            "docs": "pending",
        }
        moved = client.post(f"{base}/launch/milestones/build", json={"deadline": "2027-02-01"}, headers=headers)
        assert moved.json()["goal"]["milestones"][0]["deadline"] == "2027-02-01"
        patched = client.patch(f"{base}/launch", json={"priority": "critical"}, headers=headers).json()
        assert patched["goal"]["priority"] == "critical"
        assert client.get(f"{base}/nope", headers=headers).status_code == 404
        assert client.post(f"{base}/launch/tasks/nope", json={"status": "done"}, headers=headers).status_code == 404
        bad = client.post(f"{base}/launch/tasks/api", json={"status": "finished"}, headers=headers)
        assert bad.status_code == 422
    assert (workspace / "tenants/acme/workers/alice/goals/launch.md").read_text(encoding="utf-8").count("#") == 1


class Reloads:
    def __init__(self) -> None:
        self.targets: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, outcome: ReloadOutcome) -> None:
        self.targets.append(outcome.target)
        self._changed.set()

    async def wait_for(self, target: str) -> None:
        async def seen() -> None:
            while target not in self.targets:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(seen(), TIMEOUT)

    async def wait_for_count(self, target: str, count: int) -> None:
        async def seen() -> None:
            while self.targets.count(target) < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(seen(), TIMEOUT)


@asynccontextmanager
async def watching(root: Path) -> AsyncIterator[tuple[WorkspaceRegistry, Reloads]]:
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    reloads = Reloads()
    watcher = WorkspaceWatcher(registry, debounce_ms=50, on_reload=reloads)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    probe = root / ".probe"
    for attempt in range(100):  # handshake: the OS watch is live before the test edits
        probe.write_text(str(attempt), encoding="utf-8")
        try:
            await asyncio.wait_for(watcher.saw_changes.wait(), 0.2)
            break
        except TimeoutError:
            continue
    assert watcher.saw_changes.is_set(), "file watcher never became live"
    try:
        yield registry, reloads
    finally:
        stop.set()
        await asyncio.wait_for(task, TIMEOUT)


@pytest.mark.anyio
async def test_each_goal_edit_reloads_its_worker_once_and_lifecycle_state_is_never_watched(
    workspace: Path,
) -> None:
    goals = GoalAggregate(workspace)
    async with watching(workspace) as (registry, reloads):
        await goals.move("acme", "alice", "launch", "pause")
        await reloads.wait_for("acme/alice")
        worker = registry.worker("acme", "alice")
        assert worker is not None and worker.goals["launch"].status == "paused"
        await goals.move("acme", "alice", "launch", "pause")  # already paused: nothing written
        await goals.move("acme", "alice", "launch", "resume")
        await reloads.wait_for_count("acme/alice", 2)
        projector = GoalProgressProjector(goals, TaskLifecycle(workspace))
        checker = GoalProgressChecker(goals, projector, clock=lambda: datetime(2026, 2, 1, tzinfo=UTC))
        assert [h.health for h in await checker.check_worker("acme", "alice")] == ["off_track"]
        assert (workspace / "tenants/acme/workers/alice/runtime/goals/health.json").is_file()  # runtime/: unwatched
        bob = workspace / "tenants/acme/workers/bob/PERSONA.md"  # a marker edit after everything above
        bob.write_text(bob.read_text(encoding="utf-8").replace("role: assistant", "role: helper"), encoding="utf-8")
        await reloads.wait_for("acme/bob")
    assert reloads.targets.count("acme/alice") == 2  # one per real edit: pause, resume
