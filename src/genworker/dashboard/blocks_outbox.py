"""The dashboard block of a worker's outbox: the messages it still owes people, each as the outbox
describes it, with whether a person may send it again (`POST /api/v1/workers/{w}/outbox/{id}/resend`)."""

from __future__ import annotations

from typing import Any

from genworker.dashboard.aggregator import BlockContext, BlockUnavailable
from genworker.delivery.outbox import RESENDABLE, Outbox

__all__ = ["outbox"]


async def outbox(ctx: BlockContext) -> dict[str, Any]:
    """Being sent, waiting for a re-send, given up, or of unknown outcome; oldest first."""
    box: Outbox | None = getattr(ctx.runtime, "outbox", None)
    if box is None:
        raise BlockUnavailable("the outbox is not running in this runtime")
    found = await box.undelivered(ctx.tenant_id, ctx.worker_id)
    return {"entries": [{**e.describe(), "resendable": e.state in RESENDABLE} for e in found]}
