"""A fire watched against its duty's `contract.sla`, measured from the trigger's slot:

- `response_time`: the run must start (be accepted) within it; a later start is a breach;
- `completion_time`: the fire must have ended (run recorded, result delivered) within it; at the
  deadline a run still going is a breach. The run is not stopped: it may be in the middle of a side
  effect, and its execution depth bounds it.

Each breach is reported once, with the run's id, to `on_breach` (outcomes.DutyOutcomes.sla_breached).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from genworker.autonomy.duties.outcomes import SlaBreach
from genworker.workspace.models.duty_terms import SlaTerms

__all__ = ["SlaWatch"]

OnBreach = Callable[[SlaBreach, str], Awaitable[None]]


class SlaWatch:
    def __init__(
        self,
        sla: SlaTerms,
        slot: datetime,
        trigger_id: str,
        key: str | None,
        on_breach: OnBreach,
        clock: Callable[[], datetime],
    ) -> None:
        self.sla, self.slot, self.trigger_id, self.key = sla, slot, trigger_id, key
        self.on_breach = on_breach
        self.clock = clock
        self.run_id: str | None = None
        self.accepted_at: datetime | None = None
        self._accepted = asyncio.Event()
        self._done = asyncio.Event()

    def accept(self, run_id: str) -> None:
        """The router accepted the fire as run `run_id` (it starts now)."""
        if self.run_id is None:
            self.run_id, self.accepted_at = run_id, self.clock()
            self._accepted.set()

    def finish(self) -> None:
        self._done.set()

    async def watch(self) -> None:
        """Until the fire is done: a late start, then a late end, each reported once."""
        if not await self._accepted_or_done():
            return
        assert self.run_id is not None and self.accepted_at is not None
        if self.sla.response_s is not None:
            late = (self.accepted_at - self.slot).total_seconds()
            if late > self.sla.response_s:
                await self._breach("response", self.sla.response_s, late)
        if self.sla.completion_s is None:
            return
        remaining = (self.slot + timedelta(seconds=self.sla.completion_s) - self.clock()).total_seconds()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), max(remaining, 0.0))
        if not self._done.is_set():
            await self._breach("completion", self.sla.completion_s, (self.clock() - self.slot).total_seconds())

    async def _accepted_or_done(self) -> bool:
        waits = [asyncio.ensure_future(self._accepted.wait()), asyncio.ensure_future(self._done.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        return self._accepted.is_set()

    async def _breach(self, kind: str, limit: float, elapsed: float) -> None:
        assert self.run_id is not None
        await self.on_breach(SlaBreach(kind, limit, elapsed, self.slot, self.key, self.trigger_id), self.run_id)
