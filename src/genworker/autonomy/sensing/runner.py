"""SensorRunner: polls one worker's sensors on their intervals, each on its own, and stops cleanly.

A sensor that cannot be built, or whose poll fails, is `degraded` with the reason and retried at its
next interval; it never stops the others. With `may_poll` (several processes: whether this one runs
the worker's autonomy now) a poll starts only while it says yes; a poll another process is still
making (SensorBusy: the worker just moved here) is tried again after BUSY_RETRY_S. Webhook sensors
are push-only: the HTTP route feeds them, the runner only reports them. `poll_now` / `poll_all` run
a poll at once (tests, operators); `trigger` wakes a sensor's loop early (push sensors use it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from genworker.autonomy.inbox import InboxItem, InboxWriter
from genworker.autonomy.sensing.base import Clock, PullSensor, utc_now
from genworker.autonomy.sensing.errors import SensorBusy, SensorError
from genworker.autonomy.sensing.factory import build_sensor
from genworker.workspace.models.persona import SensorConfig
from genworker.workspace.snapshot import Worker

__all__ = ["BUSY_RETRY_S", "DEFAULT_POLL_INTERVAL_S", "SensorBuilder", "SensorRunner", "SensorState", "SensorStatus"]

log = logging.getLogger("genworker.sensing")

DEFAULT_POLL_INTERVAL_S = 300.0
STOP_TIMEOUT_S = 10.0
BUSY_RETRY_S = 1.0

SensorState = Literal["ready", "degraded", "stopped"]
SensorBuilder = Callable[[SensorConfig], PullSensor | None]


@dataclass(frozen=True, slots=True)
class SensorStatus:
    tenant_id: str
    worker_id: str
    sensor_key: str
    source_type: str
    mode: Literal["poll", "push"]
    state: SensorState
    reason: str = ""
    poll_interval: float | None = None
    polls: int = 0
    consecutive_failures: int = 0
    facts_written: int = 0
    last_poll_at: datetime | None = None
    last_success_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for name in ("last_poll_at", "last_success_at"):
            value = data[name]
            data[name] = value.isoformat() if value is not None else None
        return data


class SensorRunner:
    """The sensors of one worker. Building it resolves paths (blocking); `start` once, `stop` once."""

    def __init__(
        self,
        worker: Worker,
        writer: InboxWriter,
        clock: Clock = utc_now,
        *,
        workspace: Path,
        on_status: Callable[[SensorStatus], None] | None = None,
        build: SensorBuilder | None = None,
        may_poll: Callable[[], bool] | None = None,
    ) -> None:
        self.worker = worker
        self.may_poll = may_poll or (lambda: True)
        self.writer = writer
        self.clock = clock
        self.on_status = on_status
        self._build = build or (lambda c: build_sensor(worker, c, writer, workspace=workspace, clock=clock))
        self._sensors: dict[str, PullSensor] = {}
        self._status: dict[str, SensorStatus] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        for config in worker.persona.sensor_configs:
            self._add(config)

    def _add(self, config: SensorConfig) -> None:
        mode: Literal["poll", "push"] = "push" if config.source_type == "webhook" else "poll"
        interval = None if mode == "push" else (config.poll_interval or DEFAULT_POLL_INTERVAL_S)
        tenant_id, worker_id = self.worker.key
        base = SensorStatus(tenant_id, worker_id, config.key, config.source_type, mode, "ready", poll_interval=interval)
        try:
            sensor = self._build(config)
        except Exception as exc:  # a broken config degrades this sensor only
            if isinstance(exc, SensorError):  # said once per build: at start-up and when its config changes
                log.warning("[Sensor] %s/%s: %s will not run: %s", *self.worker.key, config.key, exc)
            else:
                log.exception("[Sensor] %s/%s: cannot build %s", *self.worker.key, config.key)
            self._status[config.key] = dataclasses.replace(base, state="degraded", reason=_reason(exc))
            return
        if sensor is not None:
            self._sensors[config.key] = sensor
            self._wake[config.key] = asyncio.Event()
        self._status[config.key] = base

    # -- what the runner exposes ---------------------------------------------------------

    @property
    def sensors(self) -> Mapping[str, PullSensor]:
        return MappingProxyType(self._sensors)

    def statuses(self) -> list[SensorStatus]:
        return list(self._status.values())

    def status(self, sensor_key: str) -> SensorStatus:
        return self._status[sensor_key]

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """One polling task per pull sensor (it polls at once, then every poll_interval)."""
        if self._tasks:
            return
        w = "/".join(self.worker.key)
        for key, sensor in self._sensors.items():
            self._tasks.append(asyncio.create_task(self._loop(sensor), name=f"sensor:{w}/{key}"))
            self._tasks.append(asyncio.create_task(self._watch(sensor), name=f"sensor-push:{w}/{key}"))

    async def stop(self, grace_s: float = STOP_TIMEOUT_S) -> None:
        """Let running polls finish (up to `grace_s`, then cancel them) and mark every sensor stopped.

        Cancelling between an inbox write and the cursor move is safe: the next run repeats the
        facts and the inbox drops them by dedupe key.
        """
        self._stop.set()
        for wake in self._wake.values():
            wake.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._tasks.clear()
        for key in self._status:
            self._set(key, state="stopped")

    def trigger(self, sensor_key: str) -> None:
        """Wake the sensor's loop now instead of at its next interval."""
        self._wake[sensor_key].set()

    async def poll_now(self, sensor_key: str) -> list[InboxItem]:
        """Poll one sensor at once; its error is recorded in the status and raised."""
        sensor = self._sensors.get(sensor_key)
        if sensor is None:
            raise KeyError(f"no pull sensor {sensor_key!r} for {'/'.join(self.worker.key)}")
        items = await self._poll(sensor, reraise=True)
        return items or []

    async def poll_all(self) -> dict[str, list[InboxItem]]:
        """Poll every pull sensor concurrently; a failing one is left out (see its status)."""
        keys = list(self._sensors)
        results = await asyncio.gather(*(self._poll_unless_busy(self._sensors[k]) for k in keys))
        return {key: items for key, items in zip(keys, results, strict=True) if items is not None}

    # -- internals -----------------------------------------------------------------------

    async def _loop(self, sensor: PullSensor) -> None:
        wake = self._wake[sensor.key]
        interval = self._status[sensor.key].poll_interval or DEFAULT_POLL_INTERVAL_S
        while not self._stop.is_set():
            wake.clear()
            pause = interval
            if self.may_poll() and await self._poll_unless_busy(sensor) is _BUSY:
                pause = min(interval, BUSY_RETRY_S)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await wake.wait()

    async def _poll_unless_busy(self, sensor: PullSensor) -> list[InboxItem] | None:
        """`_poll`; None when it failed, `_BUSY` (empty) when another process was polling it."""
        try:
            return await self._poll(sensor)
        except SensorBusy as busy:
            log.info("[Sensor] %s/%s: %s", *self.worker.key, busy)
            return _BUSY

    async def _watch(self, sensor: PullSensor) -> None:
        try:
            await sensor.watch(lambda: self.trigger(sensor.key), self._stop)
        except Exception:  # push is an optimisation: polling goes on without it
            log.exception("[Sensor] %s/%s: push watch of %s stopped; polling continues", *self.worker.key, sensor.key)

    async def _poll(self, sensor: PullSensor, *, reraise: bool = False) -> list[InboxItem] | None:
        key = sensor.key
        started = self.clock()
        try:
            items = await sensor.poll()
        except SensorBusy:  # not a failure of the source: nothing was read
            raise
        except Exception as exc:
            status = self._status[key]
            # Said when the failure starts or changes; the same failure poll after poll only at DEBUG
            # (a mailbox that is down would otherwise log every poll_interval all day).
            again = status.state == "degraded" and status.reason == _reason(exc)
            if again:
                log.debug("[Sensor] %s/%s: %s poll failed again: %s", *self.worker.key, key, exc)
            elif isinstance(exc, SensorError):
                log.warning("[Sensor] %s/%s: %s poll failed: %s", *self.worker.key, key, exc)
            else:
                log.exception("[Sensor] %s/%s: %s poll failed", *self.worker.key, key)
            self._set(
                key,
                state="degraded",
                reason=_reason(exc),
                polls=status.polls + 1,
                consecutive_failures=status.consecutive_failures + 1,
                last_poll_at=started,
            )
            if reraise:
                raise
            return None
        status = self._status[key]
        if status.consecutive_failures:
            failed = status.consecutive_failures
            log.info("[Sensor] %s/%s: %s polls again (%d failed before)", *self.worker.key, key, failed)
        self._set(
            key,
            state="ready",
            reason="",
            polls=status.polls + 1,
            consecutive_failures=0,
            facts_written=status.facts_written + len(items),
            last_poll_at=started,
            last_success_at=started,
        )
        return items

    def _set(self, key: str, **changes: Any) -> None:
        status = dataclasses.replace(self._status[key], **changes)
        self._status[key] = status
        if self.on_status is not None:
            self.on_status(status)


_BUSY: list[InboxItem] = []  # compared by identity


def _reason(exc: BaseException) -> str:
    if isinstance(exc, SensorError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
