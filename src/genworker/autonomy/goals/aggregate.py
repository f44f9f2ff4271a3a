"""GoalAggregate: the only code that changes a goal file (seed §8, "Goal lifecycle").

Commands — approve / reject / pause / resume / archive / complete / milestone / task / update —
are atomic edits of ``goals/*.md`` under the goal's lock (``runtime/locks/goals/{goal_id}.lock``,
outside the watched folders). Each reads the file fresh, changes only the fields it owns, keeps
the body, comments and unknown fields, validates the result like the loader does, and writes
only when the text changed. The one write wakes the watcher once; nothing the reload does writes
the goal again, so there is no reload loop. Repeating a command that already holds is a no-op.

Status moves::

    pending_approval ─approve─▶ active ◀─resume── paused
           └──reject─▶ rejected   │ └──pause──▶──┘
    active | paused ─complete─▶ completed;   anything ─archive─▶ archived

Files in upstream genworker's spelling stay in it: a goal `abandoned` is archived, and a file
whose tasks or milestones say `completed` (upstream's `done`) gets `completed` when a command
marks something done.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, get_args

from genworker.autonomy.goals.document import edit_goal_file, parse_goal_text, read_goal_id
from genworker.autonomy.goals.errors import GoalFileError, GoalNotFound, GoalTransitionError
from genworker.bus import EventBus, EventBusError, new_event
from genworker.fsutil import file_lock
from genworker.ids import safe_join, validate_id
from genworker.workspace.models import Goal, GoalStatus
from genworker.workspace.models.goal import DONE_STATUSES, TaskStatus, is_done

__all__ = ["GOAL_UPDATED", "GoalAggregate", "GoalChange", "MilestoneStatus"]

log = logging.getLogger("genworker.goals")

GOAL_UPDATED: Final = "goal.updated"
MilestoneStatus = Literal["pending", "in_progress", "done", "cancelled"]
Priority = Literal["low", "medium", "high", "critical"]

# command -> (statuses it applies to, the status it sets)
_MOVES: Final[dict[str, tuple[frozenset[GoalStatus], GoalStatus]]] = {
    "approve": (frozenset({GoalStatus.PENDING_APPROVAL}), GoalStatus.ACTIVE),
    "reject": (frozenset({GoalStatus.PENDING_APPROVAL}), GoalStatus.REJECTED),
    "pause": (frozenset({GoalStatus.ACTIVE}), GoalStatus.PAUSED),
    "resume": (frozenset({GoalStatus.PAUSED}), GoalStatus.ACTIVE),
    "complete": (frozenset({GoalStatus.ACTIVE, GoalStatus.PAUSED}), GoalStatus.COMPLETED),
    "archive": (frozenset(GoalStatus) - {GoalStatus.ARCHIVED}, GoalStatus.ARCHIVED),
}
_CLOSED: Final = DONE_STATUSES | {"cancelled"}
_UPSTREAM_GOAL_STATUS: Final = {"abandoned": GoalStatus.ARCHIVED}


@dataclass(frozen=True, slots=True)
class GoalChange:
    goal: Goal
    changed: bool  # False: the goal already was as asked, nothing written
    command: str
    rel: str


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class GoalAggregate:
    def __init__(
        self, workspace_root: Path, *, bus: EventBus | None = None, clock: Callable[[], dt.datetime] = _utc_now
    ) -> None:
        self.root = workspace_root
        self.bus = bus
        self.clock = clock

    # -- reads -------------------------------------------------------------------------

    def _worker_dir(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id)

    def _files(self, tenant_id: str, worker_id: str) -> Iterator[Path]:
        folder = self._worker_dir(tenant_id, worker_id) / "goals"
        if folder.is_dir():
            yield from sorted(p for p in folder.glob("*.md") if not p.name.startswith("."))

    def path_of(self, tenant_id: str, worker_id: str, goal_id: str) -> Path:
        validate_id(goal_id, "goal id")
        unreadable = None
        for path in self._files(tenant_id, worker_id):
            declared = read_goal_id(path)
            if declared == goal_id:
                return path
            if declared is None and path.stem == goal_id:
                unreadable = path
        if unreadable is not None:  # named like the goal but broken: let the edit say why
            return unreadable
        raise GoalNotFound(tenant_id, worker_id, goal_id)

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def get(self, tenant_id: str, worker_id: str, goal_id: str) -> Goal:
        path = self.path_of(tenant_id, worker_id, goal_id)
        return parse_goal_text(path.read_text(encoding="utf-8"), self._rel(path))

    def goals(self, tenant_id: str, worker_id: str) -> list[Goal]:
        """Every readable goal, as on disk now; a broken file is logged and skipped."""
        found = []
        for path in self._files(tenant_id, worker_id):
            try:
                found.append(parse_goal_text(path.read_text(encoding="utf-8"), self._rel(path)))
            except (GoalFileError, OSError, UnicodeDecodeError) as exc:
                log.warning("[Goals] skipped %s: %s", path, exc)
        return found

    # -- commands ----------------------------------------------------------------------

    async def move(self, tenant_id: str, worker_id: str, goal_id: str, command: str, by: str = "") -> GoalChange:
        """approve | reject | pause | resume | complete | archive."""
        change = await asyncio.to_thread(self.move_now, tenant_id, worker_id, goal_id, command)
        if change.changed:
            await self._publish(tenant_id, worker_id, change, by)
        return change

    def move_now(self, tenant_id: str, worker_id: str, goal_id: str, command: str) -> GoalChange:
        """`move` for synchronous callers (blocking; publishes no event)."""
        if command not in _MOVES:
            raise GoalTransitionError(f"unknown goal command {command!r}; use one of {sorted(_MOVES)}")
        allowed, target = _MOVES[command]

        def mutate(data: Any) -> None:
            raw = str(data.get("status", GoalStatus.ACTIVE.value))
            current = _UPSTREAM_GOAL_STATUS.get(raw) or GoalStatus(raw)
            if current == target:
                return
            if current not in allowed:
                raise GoalTransitionError(f"goal {goal_id!r} is {current.value}; cannot {command} it")
            data["status"] = target.value

        return self._edit_locked(tenant_id, worker_id, goal_id, command, mutate)

    async def set_milestone(
        self,
        tenant_id: str,
        worker_id: str,
        goal_id: str,
        milestone_id: str,
        *,
        status: MilestoneStatus | None = None,
        deadline: dt.date | None = None,
        by: str = "",
    ) -> GoalChange:
        if status is not None and status not in get_args(MilestoneStatus):
            raise GoalTransitionError(f"milestone status must be one of {list(get_args(MilestoneStatus))}")

        def mutate(data: Any) -> None:
            milestone = _find(data.get("milestones") or [], milestone_id)
            if milestone is None:
                raise GoalNotFound(tenant_id, worker_id, f"{goal_id}/{milestone_id}", "milestone")
            if status is not None and not _same(milestone.get("status", "pending"), status):
                milestone["status"] = _spelled(data, status)
            if deadline is not None and milestone.get("deadline") != deadline:
                milestone["deadline"] = deadline

        return await self._edit(tenant_id, worker_id, goal_id, "milestone", mutate, by=by)

    async def set_task(
        self, tenant_id: str, worker_id: str, goal_id: str, task_id: str, status: TaskStatus, *, by: str = ""
    ) -> GoalChange:
        """Set one goal task's status, then what follows from it: tasks whose blockers are all done
        are unblocked, and a milestone moves to in_progress / done with its tasks."""
        if status not in get_args(TaskStatus):
            raise GoalTransitionError(f"task status must be one of {list(get_args(TaskStatus))}")

        def mutate(data: Any) -> None:
            task = _find(_tasks(data), task_id)
            if task is None:
                raise GoalNotFound(tenant_id, worker_id, f"{goal_id}/{task_id}", "goal task")
            if not _same(task.get("status", "pending"), status):
                task["status"] = _spelled(data, status)
            derive_progress(data)

        return await self._edit(tenant_id, worker_id, goal_id, "task", mutate, by=by)

    async def update(
        self,
        tenant_id: str,
        worker_id: str,
        goal_id: str,
        *,
        title: str | None = None,
        priority: Priority | None = None,
        deadline: dt.date | None = None,
        by: str = "",
    ) -> GoalChange:
        if title is not None and not title.strip():
            raise GoalTransitionError("title must not be empty")

        def mutate(data: Any) -> None:
            for key, value in (("title", title), ("priority", priority), ("deadline", deadline)):
                if value is not None and data.get(key) != value:
                    data[key] = value

        return await self._edit(tenant_id, worker_id, goal_id, "update", mutate, by=by)

    async def _edit(
        self, tenant_id: str, worker_id: str, goal_id: str, command: str, mutate: Callable[[Any], None], *, by: str
    ) -> GoalChange:
        change = await asyncio.to_thread(self._edit_locked, tenant_id, worker_id, goal_id, command, mutate)
        if change.changed:
            await self._publish(tenant_id, worker_id, change, by)
        return change

    def _edit_locked(
        self, tenant_id: str, worker_id: str, goal_id: str, command: str, mutate: Callable[[Any], None]
    ) -> GoalChange:
        self.path_of(tenant_id, worker_id, goal_id)  # an invalid or unknown id leaves no lock file behind
        lock = self._worker_dir(tenant_id, worker_id) / "runtime" / "locks" / "goals" / f"{goal_id}.lock"
        with file_lock(lock):
            path = self.path_of(tenant_id, worker_id, goal_id)
            result = edit_goal_file(path, self._rel(path), mutate)
        if result.changed:
            log.info("[Goals] %s/%s %s %s", tenant_id, worker_id, goal_id, command)
        return GoalChange(result.goal, result.changed, command, self._rel(path))

    async def _publish(self, tenant_id: str, worker_id: str, change: GoalChange, by: str) -> None:
        if self.bus is None:
            return
        goal = change.goal
        payload = {"goal_id": goal.goal_id, "command": change.command, "status": goal.status.value, "by": by}
        try:
            await self.bus.publish(
                new_event(GOAL_UPDATED, source="goals", tenant_id=tenant_id, worker_id=worker_id, payload=payload)
            )
        except EventBusError as exc:
            log.warning("[Goals] %s not published: %s", GOAL_UPDATED, exc)


def _find(items: Any, item_id: str) -> Any:
    for item in items:
        if hasattr(item, "get") and str(item.get("id")) == item_id:  # upstream's ids may be numbers
            return item
    return None


def _tasks(data: Any) -> list[Any]:
    return [t for m in data.get("milestones") or [] for t in (m.get("tasks") or [])]


def _uses_completed(data: Any) -> bool:
    """Whether the file spells done the upstream way (`completed`)."""
    statuses = [m.get("status") for m in data.get("milestones") or []] + [t.get("status") for t in _tasks(data)]
    return "completed" in statuses


def _spelled(data: Any, status: str) -> str:
    return "completed" if status == "done" and _uses_completed(data) else status


def _same(current: object, status: str) -> bool:
    return current == status or (is_done(current) and is_done(status))


def derive_progress(data: Any) -> None:
    """Blocked/pending from the blockers, then each milestone's status from its tasks (only forward)."""
    tasks = _tasks(data)
    done = {str(t.get("id")) for t in tasks if is_done(t.get("status"))}
    for task in tasks:
        status = task.get("status", "pending")
        open_blockers = [b for b in task.get("blocked_by") or [] if str(b) not in done]
        if status == "pending" and open_blockers:
            task["status"] = "blocked"
        elif status == "blocked" and not open_blockers and task.get("blocked_by"):
            task["status"] = "pending"
    for milestone in data.get("milestones") or []:
        current = milestone.get("status", "pending")
        statuses = [t.get("status", "pending") for t in milestone.get("tasks") or []]
        if current in _CLOSED or not statuses:
            continue
        if all(s in _CLOSED for s in statuses) and any(is_done(s) for s in statuses):
            milestone["status"] = _spelled(data, "done")
        elif current == "pending" and any(s == "in_progress" or is_done(s) for s in statuses):
            milestone["status"] = "in_progress"
