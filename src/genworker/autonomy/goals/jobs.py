"""LifecycleJobs: the periodic lifecycle work — goal progress checks, the confirmation reminder
scan and the suggestion detectors — as APScheduler interval jobs over every loaded worker.

======================================  ========  ===============================================
key                                     default   meaning
======================================  ========  ===============================================
GENWORKER_GOAL_CHECK_INTERVAL_S         3600      project finished runs into goals, check health
GENWORKER_GOAL_DEVIATION_THRESHOLD      0.25      deviation above which a goal is off track
GENWORKER_GOAL_EVALUATION               true      judge completed runs against their goal task
GENWORKER_GOAL_EVAL_TIER                fast      the model tier of the goal evaluator
GENWORKER_GOAL_EVAL_TIMEOUT_S           60        how long the evaluator may take per run
GENWORKER_CONFIRMATION_SCAN_S           60        how often unanswered confirmations are checked
GENWORKER_SUGGESTION_SCAN_S             3600      how often the suggestion detectors run
======================================  ========  ===============================================

Each job has ``max_instances=1`` and ``coalesce=True``; one worker failing is logged and the
others still run. The jobs read the workspace through `workers`, called at each tick, so a
reload needs no resync. When a confirmation is reminded, escalated or closed follows each worker's
Steward policy block (`confirmation_policy_of`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from genworker.autonomy.goals.health import GoalProgressChecker
from genworker.autonomy.goals.projector import GoalProgressProjector
from genworker.llm.intent import Tier
from genworker.settings import Settings, SettingsError
from genworker.worker.confirmations.models import ConfirmationPolicy
from genworker.worker.confirmations.reminders import ConfirmationReminders
from genworker.workspace.snapshot import Worker

__all__ = ["LifecycleJobs", "LifecycleSettings", "confirmation_policy_of", "lifecycle_settings"]

log = logging.getLogger("genworker.lifecycle")


@dataclass(frozen=True, slots=True)
class LifecycleSettings:
    goal_check_s: float = 3600.0
    deviation_threshold: float = 0.25
    confirmation_scan_s: float = 60.0
    suggestion_scan_s: float = 3600.0
    goal_evaluation: bool = True
    goal_eval_tier: Tier = Tier.FAST
    goal_eval_timeout_s: float = 60.0


def lifecycle_settings(settings: Settings) -> LifecycleSettings:
    day = 86_400.0
    tier = (settings.get("GENWORKER_GOAL_EVAL_TIER") or Tier.FAST.value).strip().lower()
    if tier not in {t.value for t in Tier}:
        raise SettingsError(f"GENWORKER_GOAL_EVAL_TIER={tier!r}: must be one of {', '.join(t.value for t in Tier)}")
    return LifecycleSettings(
        goal_check_s=settings.number("GENWORKER_GOAL_CHECK_INTERVAL_S", 3600.0, 1.0, 7 * day),
        deviation_threshold=settings.number("GENWORKER_GOAL_DEVIATION_THRESHOLD", 0.25, 0.0, 1.0),
        confirmation_scan_s=settings.number("GENWORKER_CONFIRMATION_SCAN_S", 60.0, 1.0, day),
        suggestion_scan_s=settings.number("GENWORKER_SUGGESTION_SCAN_S", 3600.0, 1.0, 7 * day),
        goal_evaluation=settings.flag("GENWORKER_GOAL_EVALUATION", True),
        goal_eval_tier=Tier(tier),
        goal_eval_timeout_s=settings.number("GENWORKER_GOAL_EVAL_TIMEOUT_S", 60.0, 1.0, 3600.0),
    )


def confirmation_policy_of(policy_of: Callable[[str, str], Any]) -> Callable[[str, str], ConfirmationPolicy]:
    """A worker's confirmation policy from its effective Steward policy: reminders every
    `brief_window_hours`, the timeout `waiting_default_timeout_hours`, `waiting_timeout_action`."""

    def of(tenant_id: str, worker_id: str) -> ConfirmationPolicy:
        p = policy_of(tenant_id, worker_id)
        return ConfirmationPolicy.of(p.brief_window_hours, p.waiting_default_timeout_hours, p.waiting_timeout_action)

    return of


PerWorker = Callable[[Worker], Awaitable[Any]]


class LifecycleJobs:
    def __init__(
        self,
        workers: Callable[[], list[Worker]],
        settings: LifecycleSettings,
        *,
        checker: GoalProgressChecker | None = None,
        reminders: ConfirmationReminders | None = None,
        detect: PerWorker | None = None,
    ) -> None:
        self.workers = workers
        self.settings = settings
        self.checker = checker
        self.reminders = reminders
        self.detect = detect
        self.last_error: dict[str, str] = {}
        self._scheduler: AsyncIOScheduler | None = None
        self._ticks: set[asyncio.Task[Any]] = set()

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    @property
    def projector(self) -> GoalProgressProjector | None:
        """What judges runs against their goals and projects the verdicts (through the goal check)."""
        return self.checker.projector if self.checker is not None else None

    def jobs(self) -> dict[str, Any]:
        return {} if self._scheduler is None else {j.id: j for j in self._scheduler.get_jobs()}

    async def start(self) -> None:
        if self._scheduler is not None:
            return
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.start()
        s = self.settings
        if self.checker is not None:
            self._add("lifecycle:goals", s.goal_check_s, self.check_goals)
        if self.reminders is not None:
            self._add("lifecycle:confirmations", s.confirmation_scan_s, self.remind)
        if self.detect is not None:
            self._add("lifecycle:suggestions", s.suggestion_scan_s, self.detect_suggestions)

    def _add(self, ident: str, seconds: float, job: Callable[[], Awaitable[Any]]) -> None:
        assert self._scheduler is not None
        self._scheduler.add_job(
            self._tick,
            IntervalTrigger(seconds=seconds, jitter=min(seconds * 0.1, 30.0), timezone=UTC),
            args=(ident, job),
            id=ident,
            name=ident,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(int(seconds), 1),
        )

    async def _tick(self, ident: str, job: Callable[[], Awaitable[Any]]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._ticks.add(task)
        try:
            await job()
        except Exception as exc:
            log.exception("[Lifecycle] %s failed", ident)
            self.last_error[ident] = f"{datetime.now(UTC).isoformat()} {type(exc).__name__}: {exc}"
        else:
            self.last_error.pop(ident, None)
        finally:
            if task is not None:
                self._ticks.discard(task)

    async def check_goals(self) -> None:
        assert self.checker is not None
        checker = self.checker
        await self._each(lambda w: checker.check_worker(w.tenant_id, w.worker_id), only=lambda w: bool(w.goals))

    async def remind(self) -> None:
        assert self.reminders is not None
        await self.reminders.scan((w.tenant_id, w.worker_id) for w in self.workers())

    async def detect_suggestions(self) -> None:
        assert self.detect is not None
        await self._each(self.detect)

    async def _each(self, job: PerWorker, only: Callable[[Worker], bool] = lambda w: True) -> None:
        for worker in self.workers():
            if not only(worker):
                continue
            try:
                await job(worker)
            except Exception:  # one worker's broken files must not stop the others
                log.exception("[Lifecycle] %s/%s failed", worker.tenant_id, worker.worker_id)

    async def stop(self, grace_s: float = 10.0) -> None:
        if self.checker is not None and self.checker.projector is not None:
            await self.checker.projector.stop(grace_s)  # goal evaluations still running
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is None:
            return
        scheduler.pause()
        ticks = list(self._ticks)
        if ticks:
            _, pending = await asyncio.wait(ticks, timeout=grace_s)
            for task in pending:
                task.cancel()
        scheduler.shutdown(wait=False)
