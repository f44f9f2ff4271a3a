"""Goal health (deviation of completion from the deadlines) and which goal task a finished run serves."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from genworker.autonomy.goals import goal_health, match_task
from genworker.autonomy.goals.projector import Projection
from genworker.worker.task import GoalStatus as RunGoalStatus
from genworker.worker.task import RunRecord, RunState, RunTimings, TaskProvenance
from genworker.workspace.models import Goal

NOW = dt.datetime(2027, 1, 10, tzinfo=dt.UTC)


def goal(**overrides: Any) -> Goal:
    data: dict[str, Any] = {
        "goal_id": "launch",
        "title": "Launch",
        "deadline": "2027-03-01",
        "milestones": [
            {
                "id": "build",
                "title": "Build",
                "deadline": "2027-01-05",
                "tasks": [
                    {"id": "api", "title": "API", "status": "done", "duty_id": "dev", "step_id": "s-api"},
                    {"id": "ui", "title": "UI", "duty_id": "dev", "step_id": "s-ui"},
                ],
            },
            {"id": "ship", "title": "Ship", "tasks": [{"id": "release", "title": "Release", "blocked_by": ["ui"]}]},
        ],
    }
    return Goal.model_validate({**data, **overrides})


def run(
    state: RunState = RunState.COMPLETED, goal_status: RunGoalStatus = RunGoalStatus.INCONCLUSIVE, **p: Any
) -> RunRecord:
    return RunRecord(
        "run_1",
        "task_1",
        "acme",
        "alice",
        state,
        RunTimings(queued_at=NOW),
        goal_status=goal_status,
        provenance=TaskProvenance("goal", **p),
    )


def test_a_milestone_past_its_deadline_puts_the_goal_off_track() -> None:
    health = goal_health(goal(), NOW.date())
    # one of two dated milestones is due (the other takes the goal's deadline); 1 of 3 tasks done
    assert (health.expected, health.completion, health.deviation) == (0.5, 0.3333, 0.1667)
    assert health.health == "off_track" and health.overdue_milestones == ("build",) and health.days_left == 50


@pytest.mark.parametrize(
    ("today", "expected"),
    [(dt.date(2027, 1, 1), "on_track"), (dt.date(2027, 3, 2), "overdue")],
)
def test_health_follows_the_calendar(today: dt.date, expected: str) -> None:
    assert goal_health(goal(), today).health == expected


def test_all_tasks_done_is_completed_and_deviation_above_threshold_is_off_track() -> None:
    done = goal(milestones=[{"id": "m", "title": "M", "tasks": [{"id": "t", "title": "T", "status": "done"}]}])
    assert goal_health(done, NOW.date()).health == "completed"
    late = goal(milestones=[{"id": "m", "title": "M", "deadline": "2027-01-11", "tasks": [{"id": "t", "title": "T"}]}])
    assert goal_health(late, dt.date(2027, 1, 11), threshold=0.5).health == "off_track"  # expected 1.0, done 0
    assert goal_health(late, dt.date(2027, 1, 10)).health == "on_track"


def test_a_run_for_the_goal_step_marks_that_task() -> None:
    g = goal()
    assert match_task(g, run(goal_id="launch", step_id="s-ui")) == Projection("launch", "ui", "in_progress")
    met = match_task(g, run(RunState.COMPLETED, RunGoalStatus.MET, goal_id="launch", step_id="s-ui"))
    assert met == Projection("launch", "ui", "done")


def test_a_duty_run_without_the_goal_only_starts_work() -> None:
    g = goal()
    started = match_task(g, run(RunState.COMPLETED, RunGoalStatus.MET, duty_id="dev"))
    assert started is not None and (started.task_id, started.status) == ("ui", "in_progress")


@pytest.mark.parametrize(
    "record",
    [
        run(RunState.FAILED, goal_id="launch", step_id="s-ui"),
        run(goal_id="other", step_id="s-ui"),
        run(goal_id="launch", step_id="s-unknown"),
        run(),
    ],
)
def test_runs_that_serve_no_open_task_change_nothing(record: RunRecord) -> None:
    assert match_task(goal(), record) is None


def test_a_paused_goal_takes_no_progress() -> None:
    assert match_task(goal(status="paused"), run(goal_id="launch", step_id="s-ui")) is None
