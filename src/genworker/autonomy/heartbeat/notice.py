"""A heartbeat's "needs attention" report, taken to the worker's owner.

The owner is the contact `identity.reports_to` names; their preferred channel is the first of
their identities the worker has a channel for (then the next, then the worker's default chats;
`delivery/recipients.py`). The report interrupts them only within the interruption
budget and outside quiet hours (`BriefService.admit`, counted once per heartbeat run); otherwise,
or when no channel takes it, it goes into the next brief. It is sent through the outbox under
`heartbeat:{tenant}:{worker}:{run_id}`, so one heartbeat run reaches the owner at most once, in
this process or any other sharing the workspace. A P0 item in the batch makes the report P0:
it interrupts even over budget and in quiet hours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from genworker.autonomy.briefs import BriefItem, BriefService, Option
from genworker.autonomy.inbox import InboxItem
from genworker.channels.registry import ChannelBinding
from genworker.delivery.outbox import Outbox, OutboxMessage
from genworker.delivery.recipients import owner_recipients
from genworker.workspace.snapshot import Worker

__all__ = ["AttentionReport", "NotifyOwner", "OwnerNotices", "report_priority"]

log = logging.getLogger("genworker.heartbeat")


@dataclass(frozen=True, slots=True)
class AttentionReport:
    message: str
    run_id: str  # the summary turn's run: the notice's idempotency key
    item_ids: tuple[str, ...]
    priority: Literal["P0", "P1"] = "P1"


class NotifyOwner(Protocol):
    """Takes a report to the worker's owner; says how: `sent: …` or `briefed: <reason>`."""

    async def __call__(self, worker: Worker, report: AttentionReport) -> str: ...


def report_priority(items: Iterable[InboxItem]) -> Literal["P0", "P1"]:
    """P0 when an item of the batch says `priority: P0` (payload or metadata), else P1."""
    for item in items:
        for fields in (item.payload, item.metadata):
            if isinstance(fields, Mapping) and str(fields.get("priority", "")).upper() == "P0":
                return "P0"
    return "P1"


class OwnerNotices:
    def __init__(
        self, briefs: BriefService, outbox: Outbox, bindings: Callable[[str, str], list[ChannelBinding]]
    ) -> None:
        self.briefs = briefs
        self.outbox = outbox
        self.bindings = bindings

    async def __call__(self, worker: Worker, report: AttentionReport) -> str:
        tenant_id, worker_id = worker.tenant_id, worker.worker_id
        run = f"GET /api/v1/workers/{worker_id}/runs/{report.run_id}"
        item = self.briefs.item(
            "conflicts",
            f"Needs attention (heartbeat): {report.message}",
            item_id=f"hb_{report.run_id}"[:64],
            ref=report.run_id,
            priority=report.priority,
            options=(Option(label="See the run", command=run),),
        )
        admission = await asyncio.to_thread(self.briefs.admit, tenant_id, worker_id, report.priority, item.item_id)
        if not admission.interrupt:
            return await self._brief(worker, item, admission.reason)
        recipients = owner_recipients(worker, self.bindings(tenant_id, worker_id))
        if not recipients:
            return await self._brief(worker, item, "no_recipient")
        name = worker.persona.identity.display_name
        entry = await self.outbox.send(
            f"heartbeat:{tenant_id}:{worker_id}:{report.run_id}",
            tenant_id,
            worker_id,
            recipients,
            OutboxMessage(f"**{name}** needs your attention:\n\n{report.message}"),
            origin={"kind": "heartbeat", "run_id": report.run_id, "items": ",".join(report.item_ids)},
            retry=False,  # an attempt that fails goes into the brief instead of being re-sent
        )
        if entry.state == "sent":
            return f"sent: {entry.delivered_to}"
        log.warning("[Heartbeat] %s/%s: notice of run %s not delivered (%s): into the brief",
                    tenant_id, worker_id, report.run_id, entry.last_error)  # fmt: skip
        return await self._brief(worker, item.model_copy(update={"detail": entry.last_error or ""}), "delivery_failed")

    async def _brief(self, worker: Worker, item: BriefItem, reason: str) -> str:
        await self.briefs.record(worker.tenant_id, worker.worker_id, item.model_copy(update={"reason": reason}))
        return f"briefed: {reason}"
