"""The scan that keeps unanswered confirmations from being forgotten: remind, escalate, close."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from genworker.worker.confirmations.models import (
    POLICY_TIMEOUT,
    Confirmation,
    ConfirmationDecided,
    ConfirmationNotifier,
    ConfirmationPolicy,
    ReminderKind,
)
from genworker.worker.confirmations.store import ConfirmationStore

__all__ = ["CloseRun", "ConfirmationReminders", "Reminder"]

log = logging.getLogger("genworker.confirmations")


@dataclass(frozen=True, slots=True)
class Reminder:
    confirmation: Confirmation
    kind: ReminderKind = "remind"

    @property
    def escalated(self) -> bool:
        return self.kind == "escalate"


CloseRun = Callable[[Confirmation], Awaitable[None]]
"""What closing a confirmation does to its waiting run (the composition root cancels it)."""


class ConfirmationReminders:
    """The scan that keeps unanswered confirmations from being forgotten (run on a schedule).

    `policy_of(tenant_id, worker_id)` gives each worker's policy (Steward's policy block, tenant then
    worker overrides); without it every worker gets `policy`.
    """

    def __init__(
        self,
        store: ConfirmationStore,
        notifier: ConfirmationNotifier,
        policy: ConfirmationPolicy | None = None,
        *,
        policy_of: Callable[[str, str], ConfirmationPolicy] | None = None,
        close_run: CloseRun | None = None,
    ) -> None:
        self.store = store
        self.notifier = notifier
        self.policy = policy or ConfirmationPolicy()
        self.policy_of = policy_of
        self.close_run = close_run

    def _policy(self, confirmation: Confirmation) -> ConfirmationPolicy:
        if self.policy_of is None:
            return self.policy
        return self.policy_of(confirmation.tenant_id, confirmation.worker_id)

    def due(self, confirmation: Confirmation, now: datetime) -> Reminder | None:
        """What `confirmation` is owed at `now`, if anything (see ConfirmationPolicy)."""
        if confirmation.status != "pending":
            return None
        policy = self._policy(confirmation)
        created = datetime.fromisoformat(confirmation.created_at)
        last = datetime.fromisoformat(confirmation.last_reminded_at) if confirmation.last_reminded_at else created
        timed_out = now - created >= policy.escalate_after
        if policy.action == "close" and timed_out:
            return Reminder(confirmation, "close")
        if policy.action in ("escalate", "remind_then_escalate") and confirmation.escalated_at is None:
            if timed_out:
                return Reminder(confirmation, "escalate")
            if policy.action == "escalate":
                return None
        every = policy.escalate_after if confirmation.escalated_at is not None else policy.remind_every
        return Reminder(confirmation, "remind") if now - last >= every else None

    def _still_due(self, fresh: Confirmation, *, now: datetime, kind: ReminderKind) -> bool:
        return self.due(fresh, now) == Reminder(fresh, kind)

    async def scan(self, workers: Iterable[tuple[str, str]], *, now: datetime | None = None) -> list[Reminder]:
        """Remind, escalate or close every pending confirmation that is due, for each (tenant, worker)."""
        sent: list[Reminder] = []
        now = now or self.store.clock()
        for tenant_id, worker_id in workers:
            pending = await asyncio.to_thread(self.store.list, tenant_id, worker_id, "pending")
            for confirmation in pending:
                reminder = self.due(confirmation, now)
                if reminder is None:
                    continue
                try:
                    done = await self._act(reminder, now)
                except Exception:
                    log.exception("[Confirmations] %s of %s failed", reminder.kind, confirmation.confirmation_id)
                    continue
                if done is not None:
                    sent.append(done)
        return sent

    async def _act(self, reminder: Reminder, now: datetime) -> Reminder | None:
        c = reminder.confirmation
        if reminder.kind == "close":
            try:
                closed = await asyncio.to_thread(
                    self.store.decide, c.tenant_id, c.worker_id, c.confirmation_id, "rejected", POLICY_TIMEOUT
                )
            except ConfirmationDecided:
                return None
            if self.close_run is not None:
                await self.close_run(closed)
            await self.notifier.closed(closed)
            return Reminder(closed, "close")
        updated = await asyncio.to_thread(
            partial(
                self.store.record_reminder,
                c,
                escalate=reminder.escalated,
                still_due=partial(self._still_due, now=now, kind=reminder.kind),
                at=now,
            )
        )
        if updated is None:
            return None
        await self.notifier.reminded(updated, escalated=reminder.escalated)
        return Reminder(updated, reminder.kind)
