"""The dashboard block of a worker's outbox: the messages it still owes people, each as the outbox
describes it, with whether a person may send it again (`POST /api/v1/workers/{w}/outbox/{id}/resend`)."""

from __future__ import annotations

from typing import Any

from genworker.dashboard.aggregator import BlockContext
from genworker.delivery.outbox import RESENDABLE

__all__ = ["outbox"]


async def outbox(ctx: BlockContext) -> dict[str, Any]:
    """Being sent, waiting for a re-send, given up, or of unknown outcome; oldest first."""
    box = ctx.runtime.services.outbox
    found = await box.undelivered(ctx.tenant_id, ctx.worker_id)
    return {"entries": [{**e.describe(), "resendable": e.state in RESENDABLE} for e in found]}
