"""When an answer the vendor would not take is tried again, and when it is given up on.

`ChannelDelivery` already retries one send a few times within seconds (`channels/outbound/http.py`). An
answer that still fails is kept in the journal and re-sent on a backoff that outlasts ordinary
outages: 30 s, 1 min, 2 min, ... doubling up to one attempt an hour, for 3 days. After that it is
set aside (`journal/dead/`, answer kept) for a person to re-send. `DueTimes` holds the time each
waiting entry is due and wakes the processor when the first one is; its clock can be replaced
(tests move it forward and call `wake`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DueTimes", "RedeliveryPolicy"]


@dataclass(frozen=True, slots=True)
class RedeliveryPolicy:
    base_s: float = 30.0
    max_s: float = 3600.0
    horizon_s: float = 3 * 24 * 3600.0  # from the first failure; then the answer is set aside

    def delay(self, failures: int) -> float:
        """The wait after the `failures`-th failed delivery (1-based)."""
        return float(min(self.max_s, self.base_s * 2.0 ** max(0, failures - 1)))

    def gives_up(self, first_failed_at: float, now: float) -> bool:
        return now - first_failed_at >= self.horizon_s


class DueTimes:
    """Journal entries waiting for a later attempt, by path; `wait_due` returns those that are due."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._due: dict[Path, float] = {}
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, path: object) -> bool:
        return path in self._due

    def at(self, path: Path) -> float | None:
        return self._due.get(path)

    def put(self, path: Path, when: float) -> None:
        self._due[path] = when
        self.wake()

    def discard(self, path: Path) -> None:
        self._due.pop(path, None)

    def wake(self) -> None:
        """Look at the due times again now (thread-safe: a test moving the clock calls it)."""
        if self._wake is None or self._loop is None:
            return
        if self._loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def wait_due(self) -> list[Path]:
        """Block until at least one entry is due; those entries, taken out, earliest first."""
        if self._wake is None:
            self._wake, self._loop = asyncio.Event(), asyncio.get_running_loop()
        while True:
            now = self.clock()
            due = sorted((when, path) for path, when in self._due.items() if when <= now)
            if due:
                for _, path in due:
                    del self._due[path]
                return [path for _, path in due]
            nearest = min(self._due.values(), default=None)
            self._wake.clear()
            timeout = None if nearest is None else max(0.0, nearest - now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
