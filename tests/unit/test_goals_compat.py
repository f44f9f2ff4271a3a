"""Goal files written the way upstream genworker writes them (issue #22): they load with our
meaning, and goal commands keep the file's own spelling."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.autonomy.goals import GoalAggregate, GoalTransitionError
from genworker.workspace.models import GoalStatus

pytestmark = pytest.mark.anyio

UPSTREAM_GOAL = """---
goal_id: data-quality-sla
title: Restore the daily data quality SLA
status: active
priority: high
deadline: "2026-06-30"
created_by: head-of-data
approved_by: ops-lead
on_complete: create_duty
external_source:
  type: email
  source_uri: email://alerts/data-quality-sla
  last_synced_at: "2026-04-20T06:00:00+00:00"
  sync_direction: bidirectional
  sync_schedule: 30m
  stakeholders:
    - head-of-data@example.com
milestones:
  - id: ms-scope
    title: Validate scope
    status: completed
    completed_at: "2026-04-28T10:00:00+00:00"
    tasks:
      - id: t1
        title: Confirm the tables
        status: completed
        notes: fin_daily
      - id: t2
        title: Quantify the impact
        status: pending
        blocked_by: [t1]
  - id: ms-fix
    title: Fix
    tasks:
      - id: t3
        title: Ship the fix
        status: blocked
        blocked_by: [t2]
skills: data-analysis
default_pre_script:
  kind: inline
  source: 'print("open incidents: 0")'
  timeout_seconds: 60
  max_tool_calls: 5
---
# Restore the daily data quality SLA
"""

LOOSE_GOAL = """

---
goal_id: 7
status: abandoned
deadline: 2026-07-01 18:00:00
milestones:
  - id: 1
    tasks:
      - id: 11
        title: Start
        status: completed
      - id: 12
        title: Continue
        blocked_by: [11]
---
# Goal without a title field

Text.
"""


@pytest.fixture
def root(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/goals/data-quality-sla.md": UPSTREAM_GOAL,
            "tenants/acme/workers/alice/goals/loose.md": LOOSE_GOAL,
        },
    )


def goal_path(root: Path, name: str) -> Path:
    return root / f"tenants/acme/workers/alice/goals/{name}.md"


def test_upstream_goal_fields(root: Path) -> None:
    goal = GoalAggregate(root).get("acme", "alice", "data-quality-sla")
    assert [m.status for m in goal.milestones] == ["done", "pending"]
    assert {t.id: t.status for t in goal.tasks()} == {"t1": "done", "t2": "pending", "t3": "blocked"}
    assert goal.milestones[0].completed_at == dt.datetime(2026, 4, 28, 10, tzinfo=dt.UTC)
    assert goal.milestones[0].tasks[0].notes == "fin_daily"
    assert (goal.created_by, goal.approved_by, goal.on_complete) == ("head-of-data", "ops-lead", "create_duty")
    assert goal.preferred_skill_ids == ("data-analysis",)  # `skills`, one string
    source = goal.external_source
    assert source is not None
    assert (source.type, source.sync_schedule, source.stakeholders) == ("email", "30m", ("head-of-data@example.com",))
    assert source.last_synced_at == dt.datetime(2026, 4, 20, 6, tzinfo=dt.UTC)
    script = goal.default_pre_script
    assert script is not None
    assert (script.kind, script.inline, script.timeout, script.max_tool_calls) == (
        "inline",
        'print("open incidents: 0")',
        60.0,
        5,
    )


def test_loose_upstream_goal(root: Path) -> None:
    goal = GoalAggregate(root).get("acme", "alice", "7")  # a numeric id is found by the aggregate too
    assert goal.title == "Goal without a title field"  # the first heading
    assert goal.status == GoalStatus.ARCHIVED  # `abandoned`
    assert goal.deadline == dt.date(2026, 7, 1)  # a datetime: its date
    assert [m.id for m in goal.milestones] == ["1"]
    assert [(t.id, t.title, t.blocked_by) for t in goal.tasks()] == [("11", "Start", ()), ("12", "Continue", ("11",))]


async def test_marking_done_keeps_the_files_completed_spelling(root: Path) -> None:
    path = goal_path(root, "data-quality-sla")
    change = await GoalAggregate(root).set_task("acme", "alice", "data-quality-sla", "t2", "done")
    assert change.changed
    text = path.read_text(encoding="utf-8")
    assert "status: done" not in text
    t2 = text.split("id: t2", 1)[1]
    assert t2.split("status: ", 1)[1].startswith("completed")  # t2, as the file spells done
    assert {t.id: t.status for t in change.goal.tasks()} == {"t1": "done", "t2": "done", "t3": "pending"}  # unblocked
    again = await GoalAggregate(root).set_task("acme", "alice", "data-quality-sla", "t1", "done")
    assert not again.changed  # `completed` already is done: nothing written


async def test_an_abandoned_goal_is_archived_and_cannot_be_completed(root: Path) -> None:
    aggregate = GoalAggregate(root)
    before = goal_path(root, "loose").read_text(encoding="utf-8")
    assert not aggregate.move_now("acme", "alice", "7", "archive").changed
    with pytest.raises(GoalTransitionError, match="is archived"):
        aggregate.move_now("acme", "alice", "7", "complete")
    assert goal_path(root, "loose").read_text(encoding="utf-8") == before


async def test_a_goal_file_with_blank_lines_before_its_front_matter_can_be_edited(root: Path) -> None:
    change = await GoalAggregate(root).set_task("acme", "alice", "7", "12", "in_progress")
    assert change.changed
    text = goal_path(root, "loose").read_text(encoding="utf-8")
    assert text.startswith("\n\n---\ngoal_id: 7\n")  # the blank lines stay
    assert "# Goal without a title field\n\nText.\n" in text
