"""The dashboard block of a worker's context spaces: whether they are on, the count by state, the
spaces a person should look at first (pending NEWs), and the most recently active, each with its
evidence and linked tasks (`GET /api/v1/workers/{w}/spaces` has the rest)."""

from __future__ import annotations

from typing import Any, Final

from genworker.dashboard.aggregator import BlockContext

__all__ = ["spaces"]

SHOWN: Final = 20


async def spaces(ctx: BlockContext) -> dict[str, Any]:
    service = ctx.runtime.services.spaces
    t, w = ctx.tenant_id, ctx.worker_id
    enabled = service.settings_of(t, w).enabled
    if not await service.exists(t, w):  # never had a space: nothing is created by looking
        return {"enabled": enabled, "counts": {}, "pending": [], "spaces": []}
    return {
        "enabled": enabled,
        "counts": await service.count(t, w),
        "pending": await service.cards(t, w, review="pending", limit=SHOWN),
        "spaces": await service.cards(t, w, review="confirmed", limit=SHOWN),
    }
