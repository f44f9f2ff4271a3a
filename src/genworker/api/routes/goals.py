"""A worker's goals with their health, and the goal commands (through the GoalAggregate). Tenant-scoped.

Unknown goal, milestone or task: 404; a command that does not apply to the goal's status: 409;
an edit the goal file would not survive (or an unreadable file): 422.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends
from pydantic import Field

from genworker.api.auth import principal_worker, require_principal, worker_not_found
from genworker.api.bodies import JsonDate, RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import GoalId, MilestoneId, TaskId, WorkerId
from genworker.auth import Principal
from genworker.autonomy.goals import (
    GoalAggregate,
    GoalChange,
    GoalFileError,
    GoalNotFound,
    GoalTransitionError,
    goal_health,
)
from genworker.runtime.composition import Runtime
from genworker.workspace.models import Goal
from genworker.workspace.models.goal import TaskStatus

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/goals", tags=["goals"], responses=error_responses(404, 503))
_EDIT = error_responses(409, 422)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
T = TypeVar("T")


class MilestoneBody(RequestBody):
    status: Literal["pending", "in_progress", "done", "cancelled"] | None = None
    deadline: JsonDate | None = None


class TaskBody(RequestBody):
    status: TaskStatus


class UpdateBody(RequestBody):
    title: str | None = Field(default=None, min_length=1, max_length=300, pattern=r"\S", description="not blank")
    priority: Literal["low", "medium", "high", "critical"] | None = None
    deadline: JsonDate | None = None


def _target(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[GoalAggregate, str, str]:
    tenant_id, worker = principal_worker(principal, worker_id)
    if runtime.registry.worker(tenant_id, worker) is None:
        raise worker_not_found(worker_id)
    return runtime.services.goals, tenant_id, worker


def goal_view(goal: Goal, today: dt.date) -> dict[str, Any]:
    return {**goal.model_dump(mode="json"), "body": goal.body, "health": asdict(goal_health(goal, today))}


async def _call(action: Callable[[], Awaitable[T]]) -> T:
    try:
        return await action()
    except GoalNotFound as exc:
        raise ApiError(404, "goal_not_found", str(exc)) from None
    except GoalTransitionError as exc:
        raise ApiError(409, "goal_conflict", str(exc)) from None
    except (GoalFileError, ValueError) as exc:
        raise ApiError(422, "goal_invalid", str(exc)) from None


def _changed(change: GoalChange) -> dict[str, Any]:
    today = dt.datetime.now(dt.UTC).date()
    return {
        "changed": change.changed,
        "command": change.command,
        "file": change.rel,
        "goal": goal_view(change.goal, today),
    }


@router.get("", summary="The worker's goals as on disk now, each with its health")
async def list_goals(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    goals, tenant_id, worker = _target(principal, runtime, worker_id)
    found = await asyncio.to_thread(goals.goals, tenant_id, worker)
    today = dt.datetime.now(dt.UTC).date()
    return {"worker_id": worker, "goals": [goal_view(g, today) for g in found]}


@router.get("/{goal_id}", summary="One goal with its health", responses=error_responses(422))
async def get_goal(worker_id: WorkerId, goal_id: GoalId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    goals, tenant_id, worker = _target(principal, runtime, worker_id)

    async def read() -> Goal:
        return await asyncio.to_thread(goals.get, tenant_id, worker, goal_id)

    return goal_view(await _call(read), dt.datetime.now(dt.UTC).date())


@router.patch("/{goal_id}", summary="Change a goal's title, priority or deadline", responses=_EDIT)
async def update_goal(
    worker_id: WorkerId, goal_id: GoalId, body: UpdateBody, principal: Auth, runtime: RuntimeDep
) -> Any:
    goals, tenant_id, worker = _target(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    change = await _call(
        lambda: goals.update(
            tenant_id, worker, goal_id, title=body.title, priority=body.priority, deadline=body.deadline, by=by
        )
    )
    return _changed(change)


@router.post("/{goal_id}/milestones/{milestone_id}", summary="Set a milestone's status or deadline", responses=_EDIT)
async def set_milestone(
    worker_id: WorkerId,
    goal_id: GoalId,
    milestone_id: MilestoneId,
    body: MilestoneBody,
    principal: Auth,
    runtime: RuntimeDep,
) -> Any:
    goals, tenant_id, worker = _target(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    change = await _call(
        lambda: goals.set_milestone(
            tenant_id, worker, goal_id, milestone_id, status=body.status, deadline=body.deadline, by=by
        )
    )
    return _changed(change)


@router.post(
    "/{goal_id}/tasks/{task_id}",
    summary="Set a goal task's status (unblocks and advances what follows)",
    responses=_EDIT,
)
async def set_task(
    worker_id: WorkerId, goal_id: GoalId, task_id: TaskId, body: TaskBody, principal: Auth, runtime: RuntimeDep
) -> Any:
    goals, tenant_id, worker = _target(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    return _changed(await _call(lambda: goals.set_task(tenant_id, worker, goal_id, task_id, body.status, by=by)))


@router.post(
    "/{goal_id}/{command}", summary="approve | reject | pause | resume | complete | archive a goal", responses=_EDIT
)
async def goal_command(
    worker_id: WorkerId,
    goal_id: GoalId,
    command: Literal["approve", "reject", "pause", "resume", "complete", "archive"],
    principal: Auth,
    runtime: RuntimeDep,
) -> Any:
    goals, tenant_id, worker = _target(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    return _changed(await _call(lambda: goals.move(tenant_id, worker, goal_id, command, by)))
