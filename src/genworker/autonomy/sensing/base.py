"""The pull-sensor contract: observe what changed since the cursor, write the facts, then move the cursor.

A concrete sensor implements `observe` (blocking; it runs in a worker thread) and `scope`; `poll`
does the rest in the one order that loses nothing: every fact into the inbox first, the cursor after,
all under the sensor's poll lock (`CursorStore.hold`), so no two processes poll from one cursor.
"""

from __future__ import annotations

import asyncio
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.sensing.cursors import Cursor, CursorStore
from genworker.autonomy.sensing.errors import SensorBusy, SensorConfigError
from genworker.autonomy.sensing.facts import Fact, FactEmitter
from genworker.ids import is_inside
from genworker.workspace.models.persona import SensorConfig

__all__ = ["Clock", "Observation", "PullSensor", "confined_path", "utc_now"]

log = logging.getLogger("genworker.sensing")

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def confined_path(worker_dir: Path, rel: str, limit: Path, what: str) -> Path:
    """`rel` under the worker folder; SensorConfigError when it resolves (through symlinks) outside `limit`."""
    path = worker_dir if rel == "." else worker_dir / rel
    if not is_inside(limit, path):
        raise SensorConfigError(f"{what} {rel!r} resolves outside {limit}")
    return path


@dataclass(frozen=True, slots=True)
class Observation:
    facts: tuple[Fact, ...]
    state: Mapping[str, Any]  # the cursor state once every fact is written


class PullSensor(ABC):
    """One configured sensor of one worker, polled by the SensorRunner."""

    def __init__(self, config: SensorConfig, emitter: FactEmitter, cursors: CursorStore, clock: Clock = utc_now):
        self.config = config
        self.emitter = emitter
        self.cursors = cursors
        self.clock = clock
        self._lock = asyncio.Lock()

    @property
    def key(self) -> str:
        return self.config.key

    @property
    def source_type(self) -> str:
        return self.config.source_type

    @abstractmethod
    def scope(self) -> str:
        """What this sensor watches, as stored in the cursor; a changed scope starts over with a baseline."""

    @abstractmethod
    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        """What changed since `previous` (None: first poll). Blocking; runs in a worker thread.

        `seq` is the number of this poll; a fact whose key could legitimately recur (a file deleted,
        a branch created) includes it, and it stays the same when a crashed poll is repeated.
        """

    async def watch(self, trigger: Callable[[], None], stop: asyncio.Event) -> None:
        """Push sensors call `trigger` when something changed; pull-only sensors return at once."""
        return

    async def poll(self) -> list[InboxItem]:
        """Observe, write every fact, then move the cursor; returns the inbox items written.
        SensorBusy when another poll of this sensor holds its lock (another process's)."""
        async with self._lock:
            held = await self._hold()
            if held is None:
                raise SensorBusy(f"{self.key}: another runtime process is polling it; the next poll goes on from there")
            try:
                return await self._poll()
            finally:
                os.close(held)

    async def _hold(self) -> int | None:
        """The poll lock, taken in a thread; a lock taken after this caller was cancelled is let go."""
        taking = asyncio.ensure_future(asyncio.to_thread(self.cursors.hold, self.key))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(_let_go)
            raise

    async def _poll(self) -> list[InboxItem]:
        # read again each time: another process may have polled since (the worker moved, and back)
        stored = await asyncio.to_thread(self.cursors.load, self.key)
        seq = stored.seq + 1 if stored is not None else 0  # keeps counting across a scope change
        previous = stored if stored is not None and self._same_scope(stored) else None
        observation = await asyncio.to_thread(self.observe, previous, seq)
        written: list[InboxItem] = []
        for fact in observation.facts:
            written.extend((await self.emitter.emit(fact)).items_written())
        cursor = Cursor(self.key, self.source_type, self.scope(), seq, observation.state, self.clock())
        await asyncio.to_thread(self.cursors.save, cursor)
        return written

    def _same_scope(self, cursor: Cursor) -> bool:
        if cursor.scope == self.scope() and cursor.source_type == self.source_type:
            return True
        log.warning(
            "[Sensor] %s: the cursor was for %s %r, now %s %r: starting over",
            self.key,
            cursor.source_type,
            cursor.scope,
            self.source_type,
            self.scope(),
        )
        return False


def _let_go(taking: asyncio.Future[int | None]) -> None:
    if not taking.cancelled() and taking.exception() is None and (fd := taking.result()) is not None:
        os.close(fd)
