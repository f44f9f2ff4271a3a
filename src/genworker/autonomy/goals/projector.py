"""GoalProgressProjector: finished runs written back into their goal tasks through the GoalAggregate.

Which goal task a completed run serves:

- the run's provenance names the goal (`goal_id`): among the goal's open tasks, the one with the
  run's `process_id`/`step_id`, else the run's `duty_id`; a run whose goal status is ``met`` marks
  that task ``done``, any other completed run marks a ``pending`` task ``in_progress``;
- the run names only a duty: every active goal's open task bound to that duty moves from
  ``pending`` to ``in_progress`` (a recurring duty's run never finishes a goal task by itself).

Several candidates: the first one that is not blocked, in file order. Failed, cancelled and other
unfinished runs change nothing. Projected run ids are remembered per worker
(``runtime/goals/projected.json``), so catching up after a restart projects each run once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from genworker.autonomy.goals.aggregate import GoalAggregate, GoalChange
from genworker.autonomy.goals.errors import GoalError
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import GoalStatus as RunGoalStatus
from genworker.worker.task import RunRecord, RunState
from genworker.workspace.models import Goal, GoalStatus
from genworker.workspace.models.goal import GoalTask, TaskStatus

__all__ = ["GoalProgressProjector", "Projection", "match_task"]

log = logging.getLogger("genworker.goals")

SCHEMA_VERSION: Final = 1
REMEMBERED: Final = 2000  # projected run ids kept per worker


@dataclass(frozen=True, slots=True)
class Projection:
    goal_id: str
    task_id: str
    status: TaskStatus


def match_task(goal: Goal, run: RunRecord) -> Projection | None:
    """What `run` means for `goal` (None: nothing)."""
    p = run.provenance
    if run.state is not RunState.COMPLETED or goal.status != GoalStatus.ACTIVE:
        return None
    if p.goal_id not in (None, goal.goal_id) or (p.goal_id is None and p.duty_id is None):
        return None
    open_tasks = [t for t in goal.tasks() if t.status not in ("done", "cancelled")]
    candidates: list[GoalTask] = []
    if p.goal_id is not None and p.step_id is not None:
        candidates = [t for t in open_tasks if t.step_id == p.step_id and t.process_id in (None, p.process_id)]
    if not candidates and p.duty_id is not None:
        candidates = [t for t in open_tasks if t.duty_id == p.duty_id]
    if not candidates:
        return None
    task = next((t for t in candidates if t.status != "blocked"), candidates[0])
    if p.goal_id is not None and run.goal_status is RunGoalStatus.MET:
        return Projection(goal.goal_id, task.id, "done")
    if task.status == "pending":
        return Projection(goal.goal_id, task.id, "in_progress")
    return None


class GoalProgressProjector:
    def __init__(self, goals: GoalAggregate, tasks: TaskLifecycle) -> None:
        self.goals = goals
        self.tasks = tasks

    async def project(self, run: RunRecord) -> list[GoalChange]:
        """Write `run`'s result into the goal tasks it serves (idempotent: the edit is a set)."""
        changes = []
        goals = await asyncio.to_thread(self.goals.goals, run.tenant_id, run.worker_id)
        for goal in goals:
            projection = match_task(goal, run)
            if projection is None:
                continue
            try:
                change = await self.goals.set_task(
                    run.tenant_id, run.worker_id, goal.goal_id, projection.task_id, projection.status, by=run.run_id
                )
            except GoalError as exc:
                log.warning("[Goals] run %s not projected into %s: %s", run.run_id, goal.goal_id, exc)
                continue
            changes.append(change)
        return changes

    async def catch_up(self, tenant_id: str, worker_id: str, *, limit: int = 200) -> list[GoalChange]:
        """Project the worker's recent finished runs not projected yet, oldest first."""
        runs = await self.tasks.list_runs(tenant_id, worker_id, limit=limit)
        done = await asyncio.to_thread(self._projected, tenant_id, worker_id)
        fresh = [r for r in reversed(runs) if r.terminal and r.run_id not in done]
        if not fresh:
            return []
        changes = []
        for run in fresh:
            changes += await self.project(run)
        await asyncio.to_thread(self._remember, tenant_id, worker_id, [r.run_id for r in fresh])
        return changes

    def _state_path(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.goals.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "goals"

    def _projected(self, tenant_id: str, worker_id: str) -> set[str]:
        path = self._state_path(tenant_id, worker_id) / "projected.json"
        if not path.is_file():
            return set()
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") != SCHEMA_VERSION:
            raise GoalError(f"{path}: unsupported schema_version {data.get('schema_version')!r}")
        return set(data.get("run_ids", ()))

    def _remember(self, tenant_id: str, worker_id: str, run_ids: list[str]) -> None:
        folder = self._state_path(tenant_id, worker_id)
        with file_lock(folder / "projected.lock"):
            path = folder / "projected.json"
            known: list[str] = []
            if path.is_file():
                known = list(json.loads(path.read_text(encoding="utf-8")).get("run_ids", ()))
            merged = list(dict.fromkeys([*known, *run_ids]))[-REMEMBERED:]
            body = {"schema_version": SCHEMA_VERSION, "run_ids": merged}
            write_atomic(path, json.dumps(body, indent=1).encode("utf-8"))
