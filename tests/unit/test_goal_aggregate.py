"""GoalAggregate: goal commands are atomic edits that keep the author's file (body, comments,
unknown fields, layout), write nothing when nothing changes, and refuse moves that do not apply."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from genworker.autonomy.goals import GoalAggregate, GoalFileError, GoalNotFound, GoalTransitionError
from genworker.bus import Event, InProcessEventBus
from genworker.workspace.registry import WorkspaceRegistry

pytestmark = pytest.mark.anyio

GOAL = """---
# the author's comment stays
goal_id: launch
title: "Launch the beta"
status: active
priority: high
deadline: 2027-03-01
owner_note: kept as written   # an unknown field
duty_refs: [weekly-review]
milestones:
    - id: build
      title: Build it
      deadline: 2027-01-15
      review_board: {chair: Dana}   # unknown nested field
      tasks:
          - id: api
            title: The API
            status: in_progress
          - id: ui
            title: The UI
            blocked_by: [api]
            status: blocked
    - id: ship
      title: Ship it
      tasks:
          - id: release
            title: Release
            blocked_by: [ui]
---
Why this matters: the beta decides the Q2 budget.

  Indented notes, trailing spaces\t\t
and a final line without a newline"""

DUTY = "---\nduty_id: weekly-review\ntitle: Weekly review\ntriggers: [{id: m, type: manual}]\n---\nReview.\n"


@pytest.fixture
def root(small_workspace: Callable[..., Path]) -> Path:
    files: Mapping[str, str] = {
        "tenants/acme/workers/alice/goals/launch.md": GOAL,
        "tenants/acme/workers/alice/duties/weekly-review.md": DUTY,
    }
    return small_workspace({"acme": ["alice"]}, files)


def goal_file(root: Path) -> Path:
    return root / "tenants/acme/workers/alice/goals/launch.md"


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


async def test_a_command_changes_only_its_line_and_keeps_body_comments_and_unknown_fields(root: Path) -> None:
    goals = GoalAggregate(root)
    change = await goals.move("acme", "alice", "launch", "pause", by="tester")
    after = goal_file(root).read_text(encoding="utf-8")
    assert change.changed and change.goal.status == "paused"
    assert changed_lines(GOAL, after) == ["-status: active", "+status: paused"]
    assert after.endswith(GOAL.split("---\n", 2)[2])  # the body byte for byte
    registry = WorkspaceRegistry(root)
    registry.load_all()
    worker = registry.worker("acme", "alice")
    assert worker is not None and worker.goals["launch"].status == "paused"
    unknown = sorted(i.field for i in worker.warnings if i.message.startswith("unknown field"))
    assert unknown == ["milestones[0].review_board", "owner_note"]  # still there, still only warnings


async def test_repeating_a_command_writes_nothing(root: Path) -> None:
    goals = GoalAggregate(root)
    await goals.move("acme", "alice", "launch", "pause")
    before = goal_file(root).stat()
    again = await goals.move("acme", "alice", "launch", "pause")
    after = goal_file(root).stat()
    assert not again.changed
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize(
    ("status", "command"), [("active", "reject"), ("paused", "approve"), ("completed", "pause"), ("archived", "resume")]
)
async def test_moves_that_do_not_apply_are_refused(root: Path, status: str, command: str) -> None:
    text = GOAL.replace("status: active", f"status: {status}")
    goal_file(root).write_text(text, encoding="utf-8")
    with pytest.raises(GoalTransitionError, match=f"is {status}; cannot {command}"):
        await GoalAggregate(root).move("acme", "alice", "launch", command)
    assert goal_file(root).read_text(encoding="utf-8") == text


async def test_a_move_that_already_holds_is_a_no_op(root: Path) -> None:
    change = await GoalAggregate(root).move("acme", "alice", "launch", "approve")
    assert not change.changed and change.goal.status == "active"


async def test_pending_goal_is_approved_then_archived(root: Path) -> None:
    goal_file(root).write_text(GOAL.replace("status: active", "status: pending_approval"), encoding="utf-8")
    goals = GoalAggregate(root)
    assert (await goals.move("acme", "alice", "launch", "approve")).goal.status == "active"
    assert (await goals.move("acme", "alice", "launch", "archive")).goal.status == "archived"
    with pytest.raises(GoalTransitionError):
        await goals.move("acme", "alice", "launch", "pause")


async def test_finishing_a_task_unblocks_the_next_and_advances_the_milestones(root: Path) -> None:
    goals = GoalAggregate(root)
    await goals.set_task("acme", "alice", "launch", "api", "done")
    goal = (await goals.set_task("acme", "alice", "launch", "ui", "done")).goal
    tasks = {t.id: t.status for t in goal.tasks()}
    milestones = {m.id: m.status for m in goal.milestones}
    assert tasks == {"api": "done", "ui": "done", "release": "pending"}
    assert milestones == {"build": "done", "ship": "pending"}
    text = goal_file(root).read_text(encoding="utf-8")
    assert "review_board: {chair: Dana}   # unknown nested field" in text
    assert "# the author's comment stays" in text


async def test_update_and_milestone_edits_publish_one_event_each(root: Path) -> None:
    bus = InProcessEventBus()
    seen: list[Event] = []

    async def record(event: Event) -> None:
        seen.append(event)

    subscription = bus.subscribe("goal.*", record)
    goals = GoalAggregate(root, bus=bus)
    import datetime as dt

    await goals.update("acme", "alice", "launch", title="Launch the public beta", deadline=dt.date(2027, 4, 1))
    await goals.set_milestone("acme", "alice", "launch", "ship", deadline=dt.date(2027, 3, 20))
    await goals.update("acme", "alice", "launch", title="Launch the public beta")  # nothing to change
    await subscription.join()
    await bus.close()
    assert [(e.topic, e.payload["command"]) for e in seen] == [
        ("goal.updated", "update"),
        ("goal.updated", "milestone"),
    ]
    goal = goals.get("acme", "alice", "launch")
    assert goal.title == "Launch the public beta" and str(goal.deadline) == "2027-04-01"
    assert str(goal.milestones[1].deadline) == "2027-03-20"


async def test_unknown_ids_and_invalid_edits_name_what_is_wrong(root: Path) -> None:
    goals = GoalAggregate(root)
    with pytest.raises(GoalNotFound, match="no goal 'nope'"):
        await goals.move("acme", "alice", "nope", "pause")
    with pytest.raises(LookupError, match="milestone"):
        await goals.set_milestone("acme", "alice", "launch", "nope", status="done")
    with pytest.raises(GoalTransitionError, match="task status"):
        await goals.set_task("acme", "alice", "launch", "api", "finished")  # type: ignore[arg-type]
    goal_file(root).write_text(GOAL.replace("status: in_progress", "status: finished"), encoding="utf-8")  # invalid
    with pytest.raises(GoalFileError, match=r"goals/launch\.md.*status"):
        await goals.move("acme", "alice", "launch", "pause")
    goal_file(root).write_text(GOAL.replace("goal_id: launch", "goal_id: [launch"), encoding="utf-8")
    with pytest.raises(GoalFileError, match=r"goals/launch\.md: invalid YAML"):
        await goals.move("acme", "alice", "launch", "pause")


@pytest.mark.parametrize("goal_id", ["-rf", "~", "..", "x" * 300, "café", "nope"])
async def test_an_invalid_or_unknown_goal_id_leaves_no_lock_file(root: Path, goal_id: str) -> None:
    goals = GoalAggregate(root)
    with pytest.raises((ValueError, GoalNotFound)):
        await goals.move("acme", "alice", goal_id, "pause")
    with pytest.raises((ValueError, GoalNotFound)):
        await goals.update("acme", "alice", goal_id, title="t")
    assert not (root / "tenants/acme/workers/alice/runtime").exists()
