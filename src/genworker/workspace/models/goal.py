"""goals/*.md: a worker's goals, milestones and goal tasks (with `blocked_by` links).

Upstream genworker's goal files load too: task and milestone status `completed` (read as
`done`), goal status `abandoned` (read as `archived`), no `title` (the first heading), a
datetime `deadline` (its date), numeric ids, and `created_by`, `approved_by`, `on_complete`,
`external_source`, `preferred_skill_ids` (alias `skills`), `default_pre_script`,
`milestones[].completed_at` and `tasks[].notes`. `success_criteria` (goal, milestone, task) is ours:
what the goal evaluator judges a run's evidence against (docs/goals.md, "Evaluation").
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field, ValidationInfo, model_validator

from genworker.workspace.models.base import Model, StrTuple, WorkspaceId, note, unique_ids
from genworker.workspace.models.duty import PreScript

__all__ = ["DONE_STATUSES", "ExternalSource", "Goal", "GoalStatus", "GoalTask", "Milestone", "is_done"]


class GoalStatus(StrEnum):
    PENDING_APPROVAL = "pending_approval"
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"
    REJECTED = "rejected"
    ARCHIVED = "archived"


TaskStatus = Literal["pending", "in_progress", "blocked", "done", "cancelled"]
DONE_STATUSES = frozenset({"done", "completed"})  # `completed` is upstream's word for a done task or milestone


def is_done(status: object) -> bool:
    """A task or milestone status (as written in a file) that means done."""
    return status in DONE_STATUSES


def _completed_is_done(value: Any, info: ValidationInfo) -> Any:
    if value == "completed":
        note(info.field_name or "status", "mapped", "'completed' -> 'done'")
        return "done"
    return value


def _abandoned_is_archived(value: Any, info: ValidationInfo) -> Any:
    if value == "abandoned":
        note(info.field_name or "status", "mapped", "'abandoned' -> 'archived'")
        return GoalStatus.ARCHIVED.value
    return value


_DATETIME_TEXT = re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)?$")


def _date_of(value: Any, info: ValidationInfo) -> Any:
    """A deadline written with a time of day is its date (upstream keeps the value as written)."""
    moment: dt.datetime | None = None
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str) and _DATETIME_TEXT.match(value.strip()):
        try:
            moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return value
    if moment is None:
        return value
    note(info.field_name or "deadline", "mapped", f"{value!s} -> {moment.date().isoformat()} (the date)")
    return moment.date()


Deadline = Annotated[dt.date | None, BeforeValidator(_date_of)]


def _aware(value: Any) -> Any:
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


Moment = Annotated[dt.date | dt.datetime | None, AfterValidator(_aware)]


class ExternalSource(Model):
    """Where a goal is kept in sync with (upstream's `external_source`). Other keys are kept: the
    field was a free map here before."""

    open_extras = True

    type: str = "manual"  # email, feishu_doc, ...
    source_uri: str = ""
    last_synced_at: Moment = None
    sync_direction: str = "bidirectional"  # inbound / outbound / bidirectional
    sync_schedule: str | None = None  # e.g. "30m"
    stakeholders: StrTuple = ()


class GoalTask(Model):
    id: WorkspaceId
    title: str = ""
    status: Annotated[TaskStatus, BeforeValidator(_completed_is_done)] = "pending"
    blocked_by: tuple[WorkspaceId, ...] = ()
    notes: str = ""
    success_criteria: StrTuple = ()  # what the goal evaluator checks a run's evidence against
    duty_id: WorkspaceId | None = None
    process_id: WorkspaceId | None = None
    step_id: WorkspaceId | None = None


class Milestone(Model):
    id: WorkspaceId
    title: str = ""
    status: Annotated[Literal["pending", "in_progress", "done", "cancelled"], BeforeValidator(_completed_is_done)] = (
        "pending"
    )
    deadline: Deadline = None
    completed_at: Moment = None
    success_criteria: StrTuple = ()
    tasks: tuple[GoalTask, ...] = ()


_HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)


class Goal(Model):
    goal_id: WorkspaceId
    title: str  # default: the body's first `# ` heading, else the goal id
    status: Annotated[GoalStatus, BeforeValidator(_abandoned_is_archived)] = GoalStatus.ACTIVE
    priority: Literal["low", "medium", "high", "critical"] = "medium"
    deadline: Deadline = None
    created_by: str = ""
    approved_by: str = ""
    on_complete: Literal["create_duty"] | None = None  # on completion, suggest a duty that keeps the result
    external_source: ExternalSource | None = None
    preferred_skill_ids: StrTuple = Field(default=(), validation_alias=AliasChoices("preferred_skill_ids", "skills"))
    default_pre_script: PreScript | None = None  # for the work this goal starts
    primary_duty_id: WorkspaceId | None = None
    duty_refs: tuple[WorkspaceId, ...] = ()
    success_criteria: StrTuple = ()
    milestones: tuple[Milestone, ...] = ()
    body: str = Field(default="", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _title_from_heading(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or data.get("title") not in (None, ""):
            return data
        heading = _HEADING.search(str(data.get("body") or ""))
        title = heading.group(1) if heading else str(data.get("goal_id") or "")
        note("title", "mapped", f"(absent) -> {title!r}, " + ("the first heading" if heading else "the goal id"))
        return {**data, "title": title}

    @model_validator(mode="after")
    def _links_resolve(self) -> Goal:
        unique_ids("milestones", [m.id for m in self.milestones])
        tasks = [t for m in self.milestones for t in m.tasks]
        unique_ids("milestones[].tasks", [t.id for t in tasks])
        known = {t.id for t in tasks}
        for task in tasks:
            if task.id in task.blocked_by:
                raise ValueError(f"task {task.id!r} is blocked by itself")
            missing = [b for b in task.blocked_by if b not in known]
            if missing:
                raise ValueError(f"task {task.id!r}: blocked_by names unknown tasks {missing}")
        return self

    def tasks(self) -> tuple[GoalTask, ...]:
        return tuple(t for m in self.milestones for t in m.tasks)

    def referenced_duties(self) -> StrTuple:
        refs = [self.primary_duty_id, *self.duty_refs, *(t.duty_id for t in self.tasks())]
        return tuple(dict.fromkeys(r for r in refs if r))
