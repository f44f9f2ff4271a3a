import datetime as dt
from typing import Any

import pytest
from pydantic import ValidationError

from genworker.workspace.models import Goal, GoalStatus


def goal(*milestones: dict[str, Any], **fields: Any) -> Goal:
    return Goal.model_validate({"goal_id": "g", "title": "Ship", "milestones": list(milestones), **fields})


def milestone(mid: str, *tasks: dict[str, Any]) -> dict[str, Any]:
    return {"id": mid, "title": mid.upper(), "tasks": list(tasks)}


def task(tid: str, *blocked_by: str, **fields: Any) -> dict[str, Any]:
    return {"id": tid, "title": tid.upper(), "blocked_by": list(blocked_by), **fields}


def test_minimal_goal_defaults() -> None:
    spec = goal()
    assert spec.status is GoalStatus.ACTIVE
    assert spec.priority == "medium"
    assert spec.deadline is None
    assert spec.milestones == spec.duty_refs == ()
    assert spec.tasks() == ()
    assert spec.referenced_duties() == ()


def test_blocked_by_resolves_across_milestones() -> None:
    spec = goal(milestone("m1", task("a")), milestone("m2", task("b", "a"), task("c", "a", "b")))
    assert [t.id for t in spec.tasks()] == ["a", "b", "c"]
    assert spec.tasks()[2].blocked_by == ("a", "b")
    assert spec.tasks()[0].status == "pending"


def test_blocked_by_unknown_task_is_an_error() -> None:
    with pytest.raises(ValidationError, match=r"task 'b': blocked_by names unknown tasks \['ghost'\]"):
        goal(milestone("m1", task("a"), task("b", "ghost")))


def test_task_blocked_by_itself_is_an_error() -> None:
    with pytest.raises(ValidationError, match="task 'a' is blocked by itself"):
        goal(milestone("m1", task("a", "a")))


def test_duplicate_milestone_ids() -> None:
    with pytest.raises(ValidationError, match="milestones: duplicate id 'm1'"):
        goal(milestone("m1"), milestone("m1"))


def test_duplicate_task_ids_across_milestones() -> None:
    with pytest.raises(ValidationError, match=r"milestones\[\].tasks: duplicate id 'a'"):
        goal(milestone("m1", task("a")), milestone("m2", task("a")))


def test_referenced_duties_are_unique_in_order() -> None:
    spec = goal(
        milestone("m1", task("a", duty_id="triage"), task("b", duty_id="brief")),
        primary_duty_id="brief",
        duty_refs=["triage", "brief"],
    )
    assert spec.referenced_duties() == ("brief", "triage")


def test_dates_status_and_priority() -> None:
    spec = goal(milestone("m1"), deadline="2030-01-31", status="paused", priority="critical")
    assert spec.deadline == dt.date(2030, 1, 31)
    assert spec.status is GoalStatus.PAUSED
    for bad in ({"deadline": "someday"}, {"status": "dreaming"}, {"priority": "urgent"}):
        with pytest.raises(ValidationError):
            goal(**bad)


def test_task_status_and_ids_are_checked() -> None:
    with pytest.raises(ValidationError):
        goal(milestone("m1", task("a", status="maybe")))
    with pytest.raises(ValidationError, match="not a valid id"):
        goal(milestone("m1", task("../a")))


def test_body_is_not_dumped() -> None:
    spec = goal(body="Long notes.")
    assert spec.body == "Long notes."
    assert "body" not in spec.model_dump()
