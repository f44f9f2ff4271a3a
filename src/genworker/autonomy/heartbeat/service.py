"""HeartbeatService: the heartbeat's parts wired once — ledger, meta, runner, scheduler — for the
composition root to start and stop and for the API to call."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from genworker.autonomy.heartbeat.config import HeartbeatSettings
from genworker.autonomy.heartbeat.ledger import AttentionLedger
from genworker.autonomy.heartbeat.main_session import HistoryLimits, MainSessionHeartbeat
from genworker.autonomy.heartbeat.meta import HeartbeatMeta, HeartbeatMetaStore
from genworker.autonomy.heartbeat.outcomes import HeartbeatReport
from genworker.autonomy.heartbeat.runner import HeartbeatRunner
from genworker.autonomy.heartbeat.scheduler import HeartbeatScheduler
from genworker.autonomy.heartbeat.strategy import HeartbeatStrategy
from genworker.autonomy.inbox import InboxAggregate
from genworker.bus import EventBus
from genworker.worker.router import WorkerRouter
from genworker.workspace.snapshot import Worker

__all__ = ["HeartbeatService"]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class HeartbeatService:
    def __init__(self, runner: HeartbeatRunner, scheduler: HeartbeatScheduler) -> None:
        self.runner = runner
        self.scheduler = scheduler

    @classmethod
    def build(
        cls,
        workspace: Path,
        router: WorkerRouter,
        inbox: InboxAggregate,
        settings: HeartbeatSettings,
        *,
        bus: EventBus | None = None,
        strategy: HeartbeatStrategy | None = None,
        limits: HistoryLimits | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> HeartbeatService:
        main = MainSessionHeartbeat(router.sessions, limits)
        runner = HeartbeatRunner(
            router,
            inbox,
            AttentionLedger(workspace, settings.attention_window, clock=clock),
            HeartbeatMetaStore(workspace, main_session_key=main.key),
            settings,
            main=main,
            strategy=strategy,
            bus=bus,
            clock=clock,
        )
        return cls(runner, HeartbeatScheduler(runner, settings))

    @property
    def settings(self) -> HeartbeatSettings:
        return self.runner.settings

    async def start(self, workers: Iterable[Worker]) -> None:
        await self.scheduler.start(workers)

    def sync(self, workers: Iterable[Worker]) -> None:
        self.scheduler.sync(workers)

    async def stop(self) -> None:
        await self.scheduler.stop()

    async def run_once(self, tenant_id: str, worker_id: str) -> HeartbeatReport:
        return await self.runner.run_once(tenant_id, worker_id)

    async def meta(self, tenant_id: str, worker_id: str) -> HeartbeatMeta | None:
        return await self.runner.meta.get(tenant_id, worker_id)
