"""SensorRegistry: one SensorRunner per loaded worker, kept in step with workspace reloads.

`sync(workers)` starts runners for new workers, restarts a worker's runner when its sensor_configs
or credentials changed, and stops runners of workers that are gone. Cursors live on disk, so a
restarted runner goes on where the old one stopped: nothing repeated, nothing skipped. Several
processes: `sync` gets the workers whose autonomy runs here, and `runs_here` stops a runner's polls
the moment this process gives its worker up, before `sync` stops the runner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from genworker.autonomy.inbox import InboxWriter
from genworker.autonomy.sensing.base import Clock, utc_now
from genworker.autonomy.sensing.runner import SensorRunner, SensorStatus
from genworker.workspace.snapshot import Worker

__all__ = ["SensorRegistry"]

log = logging.getLogger("genworker.sensing")


def _fingerprint(worker: Worker) -> tuple[Any, ...]:
    return (worker.persona.sensor_configs, worker.credentials)


class SensorRegistry:
    def __init__(
        self,
        workspace: Path,
        writer: InboxWriter,
        clock: Clock = utc_now,
        *,
        on_status: Callable[[SensorStatus], None] | None = None,
        runs_here: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.workspace = workspace
        self.runs_here = runs_here
        self.writer = writer
        self.clock = clock
        self.on_status = on_status
        self._runners: dict[tuple[str, str], tuple[tuple[Any, ...], SensorRunner]] = {}
        self._lock = asyncio.Lock()

    async def sync(self, workers: Iterable[Worker]) -> None:
        """Bring the running sensors in line with `workers` (the registry's current ones)."""
        async with self._lock:
            wanted = {w.key: w for w in workers if w.persona.sensor_configs}
            for key in [k for k in self._runners if k not in wanted]:
                await self._runners.pop(key)[1].stop()
            for key, worker in wanted.items():
                current = self._runners.get(key)
                if current is not None and current[0] == _fingerprint(worker):
                    continue
                if current is not None:
                    log.info("[Sensor] %s/%s: sensor configuration changed, restarting its sensors", *key)
                    await current[1].stop()
                runner = await asyncio.to_thread(self._runner, worker)  # building resolves paths
                self._runners[key] = (_fingerprint(worker), runner)
                await runner.start()

    def _runner(self, worker: Worker) -> SensorRunner:
        runs_here = self.runs_here
        may_poll = None if runs_here is None else partial(runs_here, *worker.key)
        return SensorRunner(
            worker, self.writer, self.clock, workspace=self.workspace, on_status=self.on_status, may_poll=may_poll
        )

    def runner(self, tenant_id: str, worker_id: str) -> SensorRunner | None:
        entry = self._runners.get((tenant_id, worker_id))
        return entry[1] if entry is not None else None

    def statuses(self) -> list[SensorStatus]:
        return [status for _, runner in self._runners.values() for status in runner.statuses()]

    def describe(self) -> dict[str, list[dict[str, Any]]]:
        """For the debug endpoint: `{"tenant/worker": [status, ...]}`."""
        return {"/".join(key): [s.as_dict() for s in runner.statuses()] for key, (_, runner) in self._runners.items()}

    async def stop(self) -> None:
        async with self._lock:
            runners = [runner for _, runner in self._runners.values()]
            self._runners.clear()
            await asyncio.gather(*(r.stop() for r in runners))
