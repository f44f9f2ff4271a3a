"""The WaitingStore interface shared by the file and Redis backends.

`resume` and `expire_due` are the two wake-ups; each moves a plan out of WAITING exactly once,
however many processes call them at the same time, and removes its index entries in the same
step (`resume` stores the event's payload and the gating instance in it too, so a crash before
the run starts loses nothing). `transition` is a compare-and-set on the plan's state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from genworker.autonomy.waiting.models import WaitingPlan, WaitState

__all__ = ["Owned", "WaitingStore"]

Owned = Callable[[str, str], bool]  # whether this process times out the plans of (tenant, worker)


class WaitingStore(Protocol):
    async def add(self, plan: WaitingPlan) -> WaitingPlan:
        """Park `plan` (state waiting) and index it; the same plan id again returns the stored plan."""

    async def get(self, tenant_id: str, worker_id: str, plan_id: str) -> WaitingPlan | None: ...

    async def waiters(self, tenant_id: str, match_key: str) -> list[WaitingPlan]:
        """The WAITING plans of a tenant indexed under `match_key`, without touching other plans."""

    async def resume(
        self,
        tenant_id: str,
        match_key: str,
        event_id: str,
        now: datetime,
        *,
        event: Mapping[str, Any] | None = None,
        gater: str | None = None,
    ) -> list[WaitingPlan]:
        """Move every WAITING plan of `match_key` to GATED (gated_by event) with the event's payload
        and the instance that gated them (`gater`); only this caller gets them."""

    async def expire_due(
        self, now: datetime, limit: int = 1000, *, only: Owned | None = None, gater: str | None = None
    ) -> list[WaitingPlan]:
        """Move WAITING plans whose wait ended by `now` to GATED (gated_by timeout, `gater` the
        scanning instance), across tenants; with `only`, just the plans of the workers it accepts
        (tenant, worker): the others stay due."""

    async def transition(
        self, tenant_id: str, worker_id: str, plan_id: str, expected: WaitState, to: WaitState, **changes: Any
    ) -> WaitingPlan:
        """Compare-and-set: raises WaitingPlanNotFound, or WaitingTransitionError when the state is not
        `expected`. Moving back to waiting re-indexes the plan (with `expires_at` from `changes`)."""

    async def list(self, tenant_id: str, worker_id: str, state: WaitState | None = None) -> list[WaitingPlan]: ...

    async def forget_ended(self, tenant_id: str, worker_id: str, before: datetime) -> int:
        """Delete the worker's ended plans (done, cancelled, closed) last changed before `before`;
        returns how many. A plan that changed meanwhile is kept."""

    async def aclose(self) -> None: ...
