"""goals/*.md: a worker's goals, milestones and goal tasks (with `blocked_by` links)."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from genworker.workspace.models.base import JsonMap, Model, StrTuple, WorkspaceId, unique_ids

__all__ = ["Goal", "GoalStatus", "GoalTask", "Milestone"]


class GoalStatus(StrEnum):
    PENDING_APPROVAL = "pending_approval"
    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"
    REJECTED = "rejected"
    ARCHIVED = "archived"


TaskStatus = Literal["pending", "in_progress", "blocked", "done", "cancelled"]


class GoalTask(Model):
    id: WorkspaceId
    title: str
    status: TaskStatus = "pending"
    blocked_by: tuple[WorkspaceId, ...] = ()
    duty_id: WorkspaceId | None = None
    process_id: WorkspaceId | None = None
    step_id: WorkspaceId | None = None


class Milestone(Model):
    id: WorkspaceId
    title: str
    status: Literal["pending", "in_progress", "done", "cancelled"] = "pending"
    deadline: dt.date | None = None
    tasks: tuple[GoalTask, ...] = ()


class Goal(Model):
    goal_id: WorkspaceId
    title: str
    status: GoalStatus = GoalStatus.ACTIVE
    priority: Literal["low", "medium", "high", "critical"] = "medium"
    deadline: dt.date | None = None
    external_source: JsonMap | None = None
    primary_duty_id: WorkspaceId | None = None
    duty_refs: tuple[WorkspaceId, ...] = ()
    milestones: tuple[Milestone, ...] = ()
    body: str = Field(default="", exclude=True)

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
