"""How confirmations are announced: inbox items and bus events, and a person told now within the
briefs' interruption budget (`through_briefs`). Escalations are P0 items naming whom they go to."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from genworker.autonomy.briefs import BriefService
from genworker.autonomy.inbox.models import InboxWriter, new_item
from genworker.bus import EventBus, EventBusError, new_event
from genworker.worker.confirmations.models import (
    CONFIRMATION_CLOSED,
    CONFIRMATION_DECIDED,
    CONFIRMATION_ESCALATED,
    CONFIRMATION_REMINDED,
    CONFIRMATION_REQUESTED,
    LANGGRAPH_INTERRUPT,
    Confirmation,
    summary_line,
)

__all__ = ["InboxConfirmationNotifier", "Notify", "through_briefs"]

log = logging.getLogger("genworker.confirmations")

Notify = Callable[["Confirmation", Literal["P0", "P1"], str], Awaitable[None]]
"""(confirmation, priority, text): tell a person now, within the interruption budget
(`through_briefs`); P0 (an escalation) always gets through."""


class InboxConfirmationNotifier:
    """Announces confirmations as inbox items and bus events, and through `notify` (a channel) when
    one is wired. Escalations are P0 items naming whom they escalate to."""

    def __init__(
        self,
        inbox: InboxWriter | None,
        bus: EventBus | None = None,
        *,
        notify: Notify | None = None,
        escalate_to: Callable[[str, str], str | None] | None = None,
    ) -> None:
        self.inbox = inbox
        self.bus = bus
        self.notify = notify
        self.escalate_to = escalate_to

    async def requested(self, confirmation: Confirmation) -> None:
        text = f"Needs your confirmation ({confirmation.confirmation_id}): {summary_line(confirmation)}"
        topic = LANGGRAPH_INTERRUPT if confirmation.kind == "interrupt" else CONFIRMATION_REQUESTED
        if confirmation.kind == "interrupt":
            text += f" — the graph asks: {confirmation.reasons[0] if confirmation.reasons else 'approve?'}"
        await self._announce(topic, confirmation, text, priority="P1", key="requested")

    async def reminded(self, confirmation: Confirmation, *, escalated: bool) -> None:
        if escalated:
            target = self.escalate_to(confirmation.tenant_id, confirmation.worker_id) if self.escalate_to else None
            who = f" — escalated to {target}" if target else " — escalated"
            text = f"Still waiting for confirmation {confirmation.confirmation_id}{who}: {summary_line(confirmation)}"
            extra = {"escalated_to": target}
            await self._announce(CONFIRMATION_ESCALATED, confirmation, text, priority="P0", key="escalated", **extra)
            return
        text = f"Reminder {confirmation.reminders}: confirmation {confirmation.confirmation_id} is waiting: " + (
            summary_line(confirmation)
        )
        await self._announce(
            CONFIRMATION_REMINDED, confirmation, text, priority="P1", key=f"reminder-{confirmation.reminders}"
        )

    async def decided(self, confirmation: Confirmation) -> None:
        await self._event(CONFIRMATION_DECIDED, confirmation)

    async def closed(self, confirmation: Confirmation) -> None:
        text = (
            f"Closed unanswered after the timeout: confirmation {confirmation.confirmation_id} "
            f"({summary_line(confirmation)}); the task was not run."
        )
        await self._announce(CONFIRMATION_CLOSED, confirmation, text, priority="P1", key="closed")

    async def _announce(
        self, topic: str, confirmation: Confirmation, text: str, *, priority: str, key: str, **extra: Any
    ) -> None:
        payload = {
            "confirmation_id": confirmation.confirmation_id,
            "kind": confirmation.kind,
            "tool": (confirmation.tool_call or {}).get("name"),
            "run_id": confirmation.run_id,
            "task_id": confirmation.task_id,
            "text": confirmation.text,
            "reasons": list(confirmation.reasons),
            "reminders": confirmation.reminders,
            "priority": priority,
            "message": text,
            **extra,
        }
        if self.inbox is not None:
            item = new_item(
                confirmation.tenant_id,
                confirmation.worker_id,
                "confirmation",
                confirmation.confirmation_id,
                topic,
                payload,
                dedupe_key=f"{confirmation.confirmation_id}:{key}",
                metadata={"priority": priority},
            )
            await self.inbox.write(item)
        await self._event(topic, confirmation, **extra)
        if self.notify is not None:
            await self.notify(confirmation, "P0" if priority == "P0" else "P1", text)

    async def _event(self, topic: str, confirmation: Confirmation, **extra: Any) -> None:
        if self.bus is None:
            return
        payload = {
            "confirmation_id": confirmation.confirmation_id,
            "status": confirmation.status,
            "run_id": confirmation.run_id,
            "reminders": confirmation.reminders,
            "decided_by": confirmation.decided_by,
            **extra,
        }
        event = new_event(
            topic,
            source="confirmations",
            tenant_id=confirmation.tenant_id,
            worker_id=confirmation.worker_id,
            payload=payload,
        )
        try:
            await self.bus.publish(event)
        except EventBusError as exc:
            log.warning("[Confirmations] %s not published: %s", topic, exc)


def through_briefs(briefs: BriefService) -> Notify:
    """`Notify` over the briefs' interruption budget and channel sink. A pending confirmation that
    may not interrupt now is not recorded again: every brief lists pending confirmations anyway.
    A closed one, no longer pending, goes into the next brief when it cannot interrupt."""

    async def notify(confirmation: Confirmation, priority: Literal["P0", "P1"], text: str) -> None:
        tenant_id, worker_id = confirmation.tenant_id, confirmation.worker_id
        if confirmation.status != "pending":
            item = briefs.item("done", text, ref=confirmation.confirmation_id, priority=priority)
            await briefs.notify(tenant_id, worker_id, item)
            return
        key = f"conf_{confirmation.confirmation_id}_{confirmation.reminders}"
        admission = await asyncio.to_thread(briefs.admit, tenant_id, worker_id, priority, key)
        if admission.interrupt and briefs.sink is not None:
            await briefs.sink.deliver(tenant_id, worker_id, text)

    return notify
