"""HeartbeatScheduler: one APScheduler interval job per loaded worker, calling HeartbeatRunner.run_once.

Each job has ``max_instances=1`` and ``coalesce=True``: a heartbeat still running when the next one is
due is not doubled, and heartbeats missed while the loop was busy collapse into one. `sync` follows
the workspace: workers that appear get a job, workers that are gone lose theirs. `stop` pauses the
jobs, lets a running heartbeat and the runs it started finish for a grace period, then shuts down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from genworker.autonomy.heartbeat.config import HeartbeatSettings
from genworker.autonomy.heartbeat.outcomes import HeartbeatReport
from genworker.autonomy.heartbeat.runner import HeartbeatRunner
from genworker.workspace.snapshot import Worker

__all__ = ["JOB_PREFIX", "HeartbeatScheduler", "job_id"]

log = logging.getLogger("genworker.heartbeat")

JOB_PREFIX: Final = "heartbeat:"


def job_id(tenant_id: str, worker_id: str) -> str:
    return f"{JOB_PREFIX}{tenant_id}/{worker_id}"


class HeartbeatScheduler:
    def __init__(self, runner: HeartbeatRunner, settings: HeartbeatSettings) -> None:
        self.runner = runner
        self.settings = settings
        self._scheduler: AsyncIOScheduler | None = None
        self._ticks: set[asyncio.Task[Any]] = set()
        self.last_error: dict[tuple[str, str], str] = {}

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def jobs(self) -> dict[str, Any]:
        """Job id -> the APScheduler job (for status pages and tests)."""
        if self._scheduler is None:
            return {}
        return {job.id: job for job in self._scheduler.get_jobs()}

    async def start(self, workers: Iterable[Worker]) -> None:
        """Start the scheduler on the running loop with a job per worker (nothing when disabled)."""
        if not self.settings.enabled or self._scheduler is not None:
            return
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.start()
        self.sync(workers)

    def sync(self, workers: Iterable[Worker]) -> None:
        """One job per worker in `workers`; jobs of other workers are removed."""
        if self._scheduler is None:
            return
        wanted = {job_id(w.tenant_id, w.worker_id): w.key for w in workers}
        for existing in self._scheduler.get_jobs():
            if existing.id.startswith(JOB_PREFIX) and existing.id not in wanted:
                existing.remove()
        interval = self.settings.interval_s
        for ident, (tenant_id, worker_id) in wanted.items():
            if self._scheduler.get_job(ident) is not None:
                continue
            self._scheduler.add_job(
                self._tick,
                IntervalTrigger(seconds=interval, jitter=min(interval * 0.1, 30.0), timezone=UTC),
                args=(tenant_id, worker_id),
                id=ident,
                name=f"heartbeat {tenant_id}/{worker_id}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(int(interval), 1),
            )

    async def _tick(self, tenant_id: str, worker_id: str) -> HeartbeatReport | None:
        task = asyncio.current_task()
        if task is not None:
            self._ticks.add(task)
        try:
            report = await self.runner.run_once(tenant_id, worker_id)
        except Exception as exc:  # one worker's broken heartbeat must not stop the others
            log.exception("[Heartbeat] %s/%s failed", tenant_id, worker_id)
            self.last_error[(tenant_id, worker_id)] = f"{datetime.now(UTC).isoformat()} {type(exc).__name__}: {exc}"
            return None
        finally:
            if task is not None:
                self._ticks.discard(task)
        self.last_error.pop((tenant_id, worker_id), None)
        return report

    async def stop(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        grace = self.settings.stop_grace_s
        if scheduler is not None:
            scheduler.pause()
            ticks = list(self._ticks)
            if ticks:
                _, pending = await asyncio.wait(ticks, timeout=grace)
                if pending:
                    log.warning("[Heartbeat] %d heartbeats still running at shutdown: cancelled", len(pending))
            scheduler.shutdown(wait=False)
        await self.runner.close(grace)
