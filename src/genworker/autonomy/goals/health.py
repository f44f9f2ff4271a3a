"""Goal health: deviation of completion from the deadlines, checked on a schedule.

- completion: done tasks / tasks not cancelled (a goal without tasks: done milestones / milestones);
- expected: the share of dated milestones (a milestone without a deadline takes the goal's) whose
  deadline has passed — what should be done by today;
- deviation: ``max(0, expected - completion)``;
- health: ``completed`` | ``overdue`` (goal deadline passed) | ``off_track`` (deviation above the
  threshold, or a milestone past its deadline and not done) | ``at_risk`` (some deviation) | ``on_track``.

`GoalProgressChecker.check_worker` first projects finished runs into the goal files, then computes
the health of every active goal. It publishes ``goal.health_changed`` when a goal's health differs
from the last check (remembered in ``runtime/goals/health.json``) and, when a goal turns
``off_track`` or ``overdue``, writes a ``goal.off_track`` inbox item whose ``deviation`` the
heartbeat's goal strategy reads.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final, Literal

from genworker.autonomy.goals.aggregate import GoalAggregate
from genworker.autonomy.goals.projector import GoalProgressProjector
from genworker.autonomy.inbox import InboxWriter, new_item
from genworker.bus import EventBus, EventBusError, new_event
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join
from genworker.workspace.models import Goal, GoalStatus

__all__ = ["GOAL_HEALTH_CHANGED", "GOAL_OFF_TRACK", "GoalHealth", "GoalProgressChecker", "Health", "goal_health"]

log = logging.getLogger("genworker.goals")

GOAL_HEALTH_CHANGED: Final = "goal.health_changed"
GOAL_OFF_TRACK: Final = "goal.off_track"
SCHEMA_VERSION: Final = 1
Health = Literal["on_track", "at_risk", "off_track", "overdue", "completed"]


@dataclass(frozen=True, slots=True)
class GoalHealth:
    goal_id: str
    health: Health
    completion: float
    expected: float
    deviation: float
    overdue_milestones: tuple[str, ...]
    days_left: int | None


def goal_health(goal: Goal, today: dt.date, *, threshold: float = 0.25) -> GoalHealth:
    tasks = [t for t in goal.tasks() if t.status != "cancelled"]
    milestones = [m for m in goal.milestones if m.status != "cancelled"]
    if tasks:
        completion = sum(t.status == "done" for t in tasks) / len(tasks)
    elif milestones:
        completion = sum(m.status == "done" for m in milestones) / len(milestones)
    else:
        completion = 1.0 if goal.status == GoalStatus.COMPLETED else 0.0
    dated = [(m, m.deadline or goal.deadline) for m in milestones if (m.deadline or goal.deadline) is not None]
    expected = sum(d is not None and d <= today for _, d in dated) / len(dated) if dated else 0.0
    deviation = round(max(0.0, expected - completion), 4)
    late = tuple(m.id for m, d in dated if d is not None and d < today and m.status != "done")
    days_left = None if goal.deadline is None else (goal.deadline - today).days
    health: Health
    if goal.status == GoalStatus.COMPLETED or (completion >= 1.0 and (tasks or milestones)):
        health = "completed"
    elif days_left is not None and days_left < 0:
        health = "overdue"
    elif deviation > threshold or late:
        health = "off_track"
    elif deviation > 0:
        health = "at_risk"
    else:
        health = "on_track"
    return GoalHealth(goal.goal_id, health, round(completion, 4), round(expected, 4), deviation, late, days_left)


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class GoalProgressChecker:
    def __init__(
        self,
        goals: GoalAggregate,
        projector: GoalProgressProjector | None = None,
        *,
        bus: EventBus | None = None,
        inbox: InboxWriter | None = None,
        threshold: float = 0.25,
        clock: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self.goals = goals
        self.projector = projector
        self.bus = bus
        self.inbox = inbox
        self.threshold = threshold
        self.clock = clock

    async def check_worker(self, tenant_id: str, worker_id: str) -> list[GoalHealth]:
        if self.projector is not None:
            await self.projector.catch_up(tenant_id, worker_id)
        goals = await asyncio.to_thread(self.goals.goals, tenant_id, worker_id)
        today = self.clock().date()
        found = [goal_health(g, today, threshold=self.threshold) for g in goals if g.status == GoalStatus.ACTIVE]
        previous = await asyncio.to_thread(self._swap, tenant_id, worker_id, {h.goal_id: h.health for h in found})
        for health in found:
            if previous.get(health.goal_id) == health.health:
                continue
            await self._publish(tenant_id, worker_id, health, previous.get(health.goal_id))
            if health.health in ("off_track", "overdue"):
                await self._notify(tenant_id, worker_id, health, today)
        return found

    async def _publish(self, tenant_id: str, worker_id: str, health: GoalHealth, before: str | None) -> None:
        if self.bus is None:
            return
        payload = {**asdict(health), "previous": before}
        event = new_event(
            GOAL_HEALTH_CHANGED, source="goals", tenant_id=tenant_id, worker_id=worker_id, payload=payload
        )
        try:
            await self.bus.publish(event)
        except EventBusError as exc:
            log.warning("[Goals] %s not published: %s", GOAL_HEALTH_CHANGED, exc)

    async def _notify(self, tenant_id: str, worker_id: str, health: GoalHealth, today: dt.date) -> None:
        if self.inbox is None:
            return
        payload = {**asdict(health), "action": "review_goal"}
        item = new_item(
            tenant_id,
            worker_id,
            "goal",
            health.goal_id,
            GOAL_OFF_TRACK,
            payload,
            dedupe_key=f"goal-health:{health.goal_id}:{health.health}:{today.isoformat()}",
        )
        await self.inbox.write(item)

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.goals.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "goals"

    def _swap(self, tenant_id: str, worker_id: str, current: dict[str, str]) -> dict[str, str]:
        """Store this check's health per goal; return the last check's."""
        folder = self._folder(tenant_id, worker_id)
        with file_lock(folder / "health.lock"):
            path = folder / "health.json"
            before: dict[str, str] = {}
            if path.is_file():
                data = json.loads(path.read_text(encoding="utf-8"))
                if data.get("schema_version") == SCHEMA_VERSION:
                    before = dict(data.get("goals", {}))
            if before != current:
                body = {"schema_version": SCHEMA_VERSION, "goals": current}
                write_atomic(path, json.dumps(body, indent=1).encode("utf-8"))
            return before
