"""Goal health (deviation of completion from the deadlines), which goal task a completed run is judged
against, and what its verdict moves."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from genworker.autonomy.goals import goal_health, match_task, target_of
from genworker.autonomy.goals.projector import Projection
from genworker.worker.task import GoalStatus as RunGoalStatus
from genworker.worker.task import GoalVerdict, RunRecord, RunState, RunTimings, TaskProvenance
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


def run(state: RunState = RunState.COMPLETED, verdict: GoalVerdict | None = None, **p: Any) -> RunRecord:
    return RunRecord(
        "run_1",
        "task_1",
        "acme",
        "alice",
        state,
        RunTimings(queued_at=NOW),
        goal_status=RunGoalStatus.INCONCLUSIVE if verdict is None else verdict.status,
        goal_verdict=verdict,
        provenance=TaskProvenance("goal", **p),
    )


def verdict(status: RunGoalStatus, task_id: str | None = "ui", goal_id: str = "launch") -> GoalVerdict:
    return GoalVerdict(status, goal_id, NOW, task_id, ("because",), ("output",))


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


def test_a_goal_run_is_judged_against_the_task_of_its_step_else_of_its_duty() -> None:
    g = goal()
    by_step = target_of([g], run(goal_id="launch", step_id="s-ui"))
    assert by_step is not None and by_step.task is not None and by_step.milestone is not None
    assert (by_step.goal.goal_id, by_step.task.id, by_step.milestone.id) == ("launch", "ui", "build")
    by_duty = target_of([g], run(goal_id="launch", duty_id="dev"))
    assert by_duty is not None and by_duty.task is not None and by_duty.task.id == "ui"  # api is done already
    assert target_of([g], run(goal_id="launch", step_id="s-unknown")) is None  # serves no goal task: not judged


def test_a_duty_run_is_judged_against_the_first_active_goal_with_an_open_task_of_that_duty() -> None:
    paused = goal(goal_id="old", status="paused")
    found = target_of([paused, goal()], run(duty_id="dev"))
    assert found is not None and found.goal.goal_id == "launch" and found.task is not None and found.task.id == "ui"
    assert target_of([goal()], run(duty_id="other")) is None


@pytest.mark.parametrize(
    "record",
    [
        run(RunState.FAILED, goal_id="launch", step_id="s-ui"),
        run(RunState.BUDGET_EXCEEDED, duty_id="dev"),
        run(goal_id="other", step_id="s-ui"),
        run(),
    ],
)
def test_runs_that_did_not_complete_or_name_no_goal_or_duty_are_not_judged(record: RunRecord) -> None:
    assert target_of([goal()], record) is None


def test_only_a_met_verdict_moves_its_task_to_done() -> None:
    g = goal()
    met = run(verdict=verdict(RunGoalStatus.MET), goal_id="launch", step_id="s-ui")
    assert match_task(g, met) == Projection("launch", "ui", "done")
    for status in (RunGoalStatus.NOT_MET, RunGoalStatus.INCONCLUSIVE):
        assert match_task(g, run(verdict=verdict(status), goal_id="launch", step_id="s-ui")) is None


@pytest.mark.parametrize(
    "record",
    [
        run(goal_id="launch", step_id="s-ui"),  # completed, never judged: completed is not met
        run(RunState.FAILED, verdict(RunGoalStatus.MET), goal_id="launch"),
        run(verdict=verdict(RunGoalStatus.MET, goal_id="other"), goal_id="other"),
        run(verdict=verdict(RunGoalStatus.MET, task_id="api"), goal_id="launch"),  # already done
        run(verdict=verdict(RunGoalStatus.MET, task_id=None), goal_id="launch"),  # the goal as a whole
    ],
)
def test_runs_without_a_met_verdict_on_an_open_task_change_nothing(record: RunRecord) -> None:
    assert match_task(goal(), record) is None


def test_a_paused_goal_takes_no_progress() -> None:
    met = run(verdict=verdict(RunGoalStatus.MET), goal_id="launch", step_id="s-ui")
    assert match_task(goal(status="paused"), met) is None
    assert target_of([goal(status="paused")], met) is None
