"""The BriefStore interface shared by the file and Redis backends (blocking: callers use threads).

`take_interruption` is the interruption budget's one atomic step: whatever the number of
processes, a day never counts more interruptions than its limit (P0 aside), and the same item
retried counts once. `generate` hands every pending item to exactly one brief.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Protocol

from genworker.autonomy.briefs.models import Brief, BriefItem, BudgetDay

__all__ = ["BriefStore"]


class BriefStore(Protocol):
    def add_item(self, tenant_id: str, worker_id: str, item: BriefItem) -> bool:
        """Keep `item` for the next brief; False when an item with its id is already kept."""

    def pending(self, tenant_id: str, worker_id: str) -> builtins.list[BriefItem]:
        """The items kept for the next brief, oldest first."""

    def generate(self, tenant_id: str, worker_id: str, build: Callable[[builtins.list[BriefItem]], Brief]) -> Brief:
        """Build a brief from the pending items, store it, then drop the items it holds."""

    def save(self, brief: Brief) -> None: ...

    def get(self, tenant_id: str, worker_id: str, brief_id: str) -> Brief:
        """Raises BriefNotFound, or BriefError for a stored brief this build cannot read."""

    def list(self, tenant_id: str, worker_id: str, limit: int = 20) -> builtins.list[Brief]:
        """Stored briefs, newest first."""

    def budget(self, tenant_id: str, worker_id: str, day: str) -> BudgetDay: ...

    def take_interruption(
        self, tenant_id: str, worker_id: str, day: str, limit: int, item_id: str, *, force: bool = False
    ) -> tuple[bool, int]:
        """Count one interruption if the day has room (or `force`, for P0); (taken, used after)."""
