"""Escalation: a duty's matter handed to a person or to another worker of the same tenant.

The target of a rule (`escalation` / `contract.escalation`) is a contact (person_id, name, alias or
handle), `owner`, or a worker id; `contact:` / `worker:` prefixes settle a name that is both.

- a person gets a message through the outbox on their preferred channel (their identities in
  order), key `escalation:{tenant}:{worker}:{run_id}:{reason}:{n}`: once, re-sent until delivered;
- a worker gets a task, routed through the WorkerRouter to that worker of the **same tenant** (the
  target is only ever looked up in the escalating worker's tenant), under the same key, so it runs
  once; it runs in the background and its run is recorded as the escalation's `ref`.

Each escalation is recorded on the escalating run (`RunRecord.escalations`) and logged; one that
cannot be carried out is recorded `failed` with the reason.

What a run owes is written first (escalation_plans.py) and removed once carried out; `recover()` at
start-up makes what a stopped process left, and the keys make an escalation already made a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from genworker.autonomy.duties.escalation_plans import DueEscalation, EscalationPlan, EscalationPlans
from genworker.channels.registry import ChannelBinding
from genworker.delivery.outbox import Outbox, OutboxMessage
from genworker.delivery.recipients import contact_recipients, find_contact, owner_of
from genworker.worker.contract_record import EscalationRecord, EscalationState
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.router import RouteRequest
from genworker.worker.task import RunRecord, RunRef
from genworker.workspace.models.duty import DutySpec
from genworker.workspace.models.duty_terms import OWNER, EscalationRule
from genworker.workspace.snapshot import Worker

__all__ = ["Escalations", "RouteAccepting", "escalation_key"]

log = logging.getLogger("genworker.duties")

RouteAccepting = Callable[[RouteRequest, Callable[[str], None]], Awaitable[tuple[RunRecord, bool]]]
"""Route a request to its end, telling the callback the run id as soon as it is accepted."""


def escalation_key(ref: RunRef, reason: str, index: int) -> str:
    return f"escalation:{ref.tenant_id}:{ref.worker_id}:{ref.run_id}:{reason}:{index}"


@dataclass(frozen=True, slots=True)
class _Matter:
    duty_id: str
    title: str


@dataclass
class Escalations:
    tasks: TaskLifecycle
    workers: Callable[[str, str], Worker | None]  # the registry's lookup: (tenant, worker id)
    outbox: Outbox | None = None
    bindings: Callable[[str, str], list[ChannelBinding]] = field(default=lambda tenant_id, worker_id: [])
    route: RouteAccepting | None = None
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    plans: EscalationPlans | None = None  # what runs owe, on disk until made (None: kept nowhere)
    _running: set[asyncio.Task[None]] = field(default_factory=set)

    # -- plans ------------------------------------------------------------------------------------

    async def plan(
        self, ref: RunRef, duty: DutySpec, due: Sequence[DueEscalation], expect: str | None, batch: str = ""
    ) -> Path | None:
        """Write what run `ref` owes (`expect`: only if it is recorded in that state) before it is made."""
        if self.plans is None or not due:
            return None
        plan = EscalationPlan(ref, duty.duty_id, duty.title, tuple(due), expect, self.clock())
        return await asyncio.to_thread(self.plans.save, plan, batch)

    async def make(
        self, worker: Worker, duty: DutySpec, ref: RunRef, due: Sequence[DueEscalation], plan: Path | None = None
    ) -> list[EscalationRecord]:
        """Make each escalation run `ref` owes, then drop its plan."""
        made = [await self._escalate(worker, _Matter(duty.duty_id, duty.title), d, ref) for d in due]
        if plan is not None and self.plans is not None:
            await asyncio.to_thread(self.plans.remove, plan)
        return made

    async def recover(self) -> int:
        """At start-up (after interrupted runs were marked): make what stopped processes' runs still owe."""
        if self.plans is None:
            return 0
        made = 0
        for path in await asyncio.to_thread(self.plans.all):
            try:
                made += await self._recover(path)
            except Exception:  # one unreadable plan must not stop the others
                log.exception("[Duties] escalation plan %s could not be recovered", path)
        if made:
            log.warning("[Duties] made the escalations of %d runs a stopped process had not made", made)
        return made

    async def _recover(self, path: Path) -> int:
        assert self.plans is not None
        plan = await asyncio.to_thread(self.plans.read, path)
        run = await self.tasks.get_run(plan.ref)
        if plan.expect is not None:
            if not run.terminal:
                return 0  # still settling in a live process
            if run.state.value != plan.expect:  # stopped before it was recorded: it owes none of it
                log.info("[Duties] run %s ended %s: its escalations are not due", plan.ref, run.state.value)
                await asyncio.to_thread(self.plans.remove, path)
                return 0
        worker = self.workers(plan.ref.tenant_id, plan.ref.worker_id)
        if worker is None:
            log.error("[Duties] run %s owes escalations, but worker %s is not loaded; kept for the next start",
                      plan.ref, plan.ref.worker_id)  # fmt: skip
            return 0
        for due in plan.due:
            await self._escalate(worker, _Matter(plan.duty_id, plan.title), due, plan.ref)
        await asyncio.to_thread(self.plans.remove, path)
        return 1

    # -- one escalation ---------------------------------------------------------------------------

    async def escalate(
        self, worker: Worker, duty: DutySpec, rule: EscalationRule, ref: RunRef, reason: str, detail: str, index: int
    ) -> EscalationRecord:
        """Carry out `rule` for run `ref` (`reason`: what happened; `detail`: the facts) and record it."""
        due = DueEscalation(rule, index, reason, detail)
        return await self._escalate(worker, _Matter(duty.duty_id, duty.title), due, ref)

    async def _escalate(self, worker: Worker, duty: _Matter, due: DueEscalation, ref: RunRef) -> EscalationRecord:
        rule, reason, detail = due.rule, due.reason, due.detail
        key = escalation_key(ref, reason, due.index)
        record = await self._carry_out(worker, duty, rule, ref, key, reason, detail)
        level = logging.ERROR if record.state == "failed" else logging.WARNING
        log.log(level, "[Duties] run %s escalated (%s) to %s: %s%s", ref, reason, rule.target, record.state,
                f" ({record.error})" if record.error else "")  # fmt: skip
        await self.tasks.record_escalations(ref, [record])
        return record

    async def _carry_out(
        self, worker: Worker, duty: _Matter, rule: EscalationRule, ref: RunRef, key: str, reason: str, detail: str
    ) -> EscalationRecord:
        name = rule.target_name
        contact = None
        if rule.target_kind in ("contact", "any"):
            contact = owner_of(worker) if name.lower() == OWNER else find_contact(worker, name)
        if contact is not None:
            return await self._to_person(worker, duty, rule, ref, key, reason, detail, contact.person_id)
        target = self.workers(worker.tenant_id, name) if rule.target_kind in ("worker", "any") else None
        if target is not None and target.worker_id != worker.worker_id:
            return await self._to_worker(worker, duty, rule, ref, key, reason, detail, target)
        why = f"no contact or worker {name!r} in tenant {worker.tenant_id!r}"
        return self._record(key, rule, "person", "failed", error=why)

    def _record(
        self,
        key: str,
        rule: EscalationRule,
        kind: Literal["person", "worker"],
        state: EscalationState,
        ref: str | None = None,
        error: str | None = None,
    ) -> EscalationRecord:
        return EscalationRecord(key, rule.condition, rule.target, kind, state, self.clock(), ref, error)

    async def _to_person(
        self,
        worker: Worker,
        duty: _Matter,
        rule: EscalationRule,
        ref: RunRef,
        key: str,
        reason: str,
        detail: str,
        person_id: str,
    ) -> EscalationRecord:
        contact = worker.contacts.get(person_id) or find_contact(worker, person_id)
        assert contact is not None
        recipients = contact_recipients(worker, self.bindings(worker.tenant_id, worker.worker_id), contact)
        if not recipients:
            return self._record(key, rule, "person", "failed", error=f"{contact.display_name} has no identity the "
                                "worker can send to")  # fmt: skip
        if self.outbox is None:
            return self._record(key, rule, "person", "failed", error="no outbox: the channels are not running")
        name = worker.persona.identity.display_name
        text = (
            f"**{name}** escalates *{duty.title}* to you ({reason}).\n\n{detail}\n\n"
            f"Run: GET /api/v1/workers/{worker.worker_id}/runs/{ref.run_id}"
        )
        message = OutboxMessage(text, "markdown", f"Escalation: {duty.title}")
        origin = {"kind": "escalation", "run_id": ref.run_id, "duty_id": duty.duty_id, "reason": reason}
        entry = await self.outbox.send(key, worker.tenant_id, worker.worker_id, recipients, message, origin=origin)
        error = entry.last_error if entry.state != "sent" else None
        return self._record(key, rule, "person", entry.state, entry.entry_id, error)

    async def _to_worker(
        self,
        worker: Worker,
        duty: _Matter,
        rule: EscalationRule,
        ref: RunRef,
        key: str,
        reason: str,
        detail: str,
        target: Worker,
    ) -> EscalationRecord:
        if self.route is None:
            return self._record(key, rule, "worker", "failed", error="no router to hand a task to")
        assert target.tenant_id == worker.tenant_id  # looked up in the escalating worker's tenant only
        text = (
            f"Escalated to you by {worker.persona.identity.display_name} ({worker.worker_id}), duty "
            f"'{duty.title}', run {ref.run_id}: {reason}.\n\n{detail}\n\nDecide what to do about it."
        )
        source = f"escalation:{worker.worker_id}"
        req = RouteRequest(target.tenant_id, target.worker_id, text, "event", source_id=source,
                           conversational=False, idempotency_key=key)  # fmt: skip
        loop = asyncio.get_running_loop()
        accepted: asyncio.Future[str] = loop.create_future()
        route = self.route

        def accept(run_id: str) -> None:
            if not accepted.done():
                accepted.set_result(run_id)

        async def run() -> None:
            try:
                await route(req, accept)
            except Exception as exc:
                if not accepted.done():
                    accepted.set_exception(exc)
                else:
                    log.exception("[Duties] the escalated task for %s failed", target.worker_id)

        task = asyncio.create_task(run(), name=f"escalation {key}")
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        try:
            run_id = await accepted
        except Exception as exc:
            return self._record(key, rule, "worker", "failed", error=f"{type(exc).__name__}: {exc}")
        return self._record(key, rule, "worker", "task_created", f"{target.worker_id}/{run_id}")

    async def stop(self, grace_s: float = 10.0) -> None:
        """Let escalated tasks finish (bounded), then cancel what is left."""
        running = list(self._running)
        if running:
            _, pending = await asyncio.wait(running, timeout=grace_s)
            for task in pending:
                task.cancel()
