"""What happens to a duty run after its engine finished: the router's `settle` and `ended` steps.

`settle` (before the run is recorded): the contract's checks (contract.py), recorded on the run;
when the result may complete, its deliveries planned (delivery.py); and the escalations its outcome
will call for, planned (escalation_plans.py). `ended` (the run is recorded): the deliveries sent,
and the escalations made. `sla_breached` is the scheduler's: an `sla_breached` event, a check on
the run, and the escalation (planned, then made). Plans are on disk, so `connect` at the next start
sends and makes what a stopped process owed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from genworker.autonomy.duties.contract import ContractChecks, duty_terms
from genworker.autonomy.duties.delivery import DutyDelivery
from genworker.autonomy.duties.escalation import Escalations
from genworker.autonomy.duties.escalation_plans import DueEscalation, EscalationPlans
from genworker.autonomy.duties.routing import route_through
from genworker.bus import EventBus, new_event
from genworker.bus.models import Event
from genworker.channels.registry import ChannelBinding
from genworker.delivery.outbox import Outbox
from genworker.engine.base import RunResult
from genworker.worker.contract_record import ContractCheck, EscalationRecord
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.router import RouteRequest, WorkerRouter
from genworker.worker.task import RunError, RunRecord, RunRef, RunState, ToolCallRecord
from genworker.workspace.models.duty import DutySpec
from genworker.workspace.models.duty_terms import EscalationRule
from genworker.workspace.snapshot import Worker

__all__ = ["SLA_BREACHED", "DutyOutcomes", "SlaBreach", "build_duty_outcomes"]

log = logging.getLogger("genworker.duties")

SLA_BREACHED = "duty.sla_breached"
_FAILED_REASONS = {"output_schema_violation": "output_invalid", "audit_evidence_missing": "audit_missing"}


@dataclass(frozen=True, slots=True)
class SlaBreach:
    kind: str  # response | completion
    limit_s: float
    elapsed_s: float
    scheduled_for: datetime
    key: str | None
    trigger_id: str

    def describe(self) -> str:
        what = "did not start" if self.kind == "response" else "did not finish"
        return (
            f"SLA breached: the run for {self.scheduled_for.isoformat()} {what} within {self.limit_s:.0f} s "
            f"(its {self.kind} time; {self.elapsed_s:.0f} s so far)"
        )


class DutyOutcomes:
    def __init__(
        self,
        tasks: TaskLifecycle,
        checks: ContractChecks,
        delivery: DutyDelivery,
        escalations: Escalations,
        bus: EventBus | None = None,
    ) -> None:
        self.tasks = tasks
        self.checks = checks
        self.delivery = delivery
        self.escalations = escalations
        self.bus = bus

    async def connect(self, outbox: Outbox, bindings: Callable[[str, str], list[ChannelBinding]]) -> None:
        """Results and escalations go out through `outbox` from now on; what a stopped process left
        undelivered goes first."""
        self.delivery.outbox = self.escalations.outbox = outbox
        self.delivery.bindings = self.escalations.bindings = bindings
        await self.delivery.recover()
        await self.escalations.recover()

    async def on_outbox(self, event: Event) -> None:
        """An outbox attempt settled: the delivery or escalation it carries follows on its run."""
        key = str(event.payload.get("key") or "")
        if key.startswith("duty:"):
            await self.delivery.on_outbox(event)
        elif key.startswith("escalation:"):
            await self._escalation_sent(event, key)

    async def _escalation_sent(self, event: Event, key: str) -> None:
        run_id, state = event.payload.get("run_id"), str(event.payload.get("state"))
        if not isinstance(run_id, str) or not event.tenant_id or not event.worker_id:
            return
        ref = RunRef(event.tenant_id, event.worker_id, run_id)
        known = next((e for e in (await self.tasks.get_run(ref)).escalations if e.key == key), None)
        if known is None or known.state == state or state not in ("sent", "retrying", "given_up", "outcome_unknown"):
            return
        error = event.payload.get("last_error") if state != "sent" else None
        updated = EscalationRecord(known.key, known.condition, known.target, known.kind, state,  # type: ignore[arg-type]
                                   datetime.now(UTC), known.ref, error)  # fmt: skip
        await self.tasks.record_escalations(ref, [updated])

    # -- the router's steps -----------------------------------------------------------------------

    async def settle(
        self, worker: Worker, duty: DutySpec, ref: RunRef, result: RunResult, tool_calls: Sequence[ToolCallRecord]
    ) -> RunResult:
        """A completed engine result checked against the contract (the run waits in `evaluating`);
        the result the run is recorded with (other results pass through), and the escalations that
        result will call for written down before it is recorded."""
        terms = duty_terms(duty)
        checks: tuple[ContractCheck, ...] = ()
        if result.status == "completed" and (
            terms.output_schema or terms.needs_evaluator or terms.audit.evidence or terms.delivery
        ):
            run = await self.tasks.evaluate(ref)
            checked = await self.checks.check(duty, result, (*run.tool_calls, *tool_calls))
            if checked.checks:
                await self.tasks.record_checks(ref, checked.checks, checked.audit_refs)
            if checked.result.status == "completed" and terms.delivery:
                verdict = run.provenance.governance_decision
                posture = verdict.posture if verdict is not None else ""
                planned = self.delivery.plan(worker, duty, ref.run_id, checked.result.output, posture)
                await self.delivery.save(ref, duty.duty_id, planned)
            result, checks = checked.result, (*run.checks, *checked.checks)
        state, error = _recorded_as(result)
        if state is not None and terms.escalations:
            await self.escalations.plan(ref, duty, _due(duty, state, error, checks), state.value)
        return result

    async def ended(self, worker: Worker, duty: DutySpec, record: RunRecord) -> RunRecord:
        """The run is recorded: deliver its result, escalate what its outcome calls for."""
        record = await self.delivery.deliver(record.ref) or record
        due = _due(duty, record.state, record.error, record.checks)
        planned = self.escalations.plans.path(record.ref) if self.escalations.plans is not None else None
        await self.escalations.make(worker, duty, record.ref, due, planned)
        return await self.tasks.get_run(record.ref) if record.terminal else record

    # -- the scheduler's -------------------------------------------------------------------------

    async def sla_breached(self, worker: Worker, duty: DutySpec, breach: SlaBreach, run_id: str | None) -> None:
        """Announce the breach (`duty.sla_breached`), record it on the run, and escalate when the
        contract says so (`on_timeout: escalate`, the default): to the rules for `sla_breached`,
        else to every escalation target of the duty, else to the owner."""
        log.warning("[Duties] %s/%s duty %s: %s (run %s)", worker.tenant_id, worker.worker_id, duty.duty_id,
                    breach.describe(), run_id)  # fmt: skip
        if self.bus is not None:
            payload = {
                "duty_id": duty.duty_id,
                "trigger_id": breach.trigger_id,
                "run_id": run_id,
                "kind": breach.kind,
                "limit_s": breach.limit_s,
                "elapsed_s": round(breach.elapsed_s, 3),
                "scheduled_for": breach.scheduled_for.isoformat(),
                "key": breach.key,
            }
            event = new_event(SLA_BREACHED, source="duties", tenant_id=worker.tenant_id,
                              worker_id=worker.worker_id, payload=payload)  # fmt: skip
            await self.bus.publish(event)
        if run_id is None:
            return
        ref = RunRef(worker.tenant_id, worker.worker_id, run_id)
        now = datetime.now(UTC)
        await self.tasks.record_checks(ref, [ContractCheck("sla", "breached", now, breach.describe())])
        terms = duty_terms(duty)
        if terms.sla.on_timeout != "escalate":
            return
        rules = [(i, r) for i, r in enumerate(terms.escalations) if r.kind == "sla_breached"]
        if not rules:
            targets = dict.fromkeys(r.target for r in terms.escalations) or {"owner": None}
            rules = [(i, EscalationRule("sla_breached", t, "sla_breached")) for i, t in enumerate(targets)]
        due = [DueEscalation(rule, index, f"sla_{breach.kind}", breach.describe()) for index, rule in rules]
        plan = await self.escalations.plan(ref, duty, due, None, f"sla_{breach.kind}")
        await self.escalations.make(worker, duty, ref, due, plan)


def _recorded_as(result: RunResult) -> tuple[RunState | None, RunError | None]:
    """The state (and error) the lifecycle records `result` with, where escalations follow from it."""
    match result.status:
        case "completed" | "condition_stopped":
            return RunState.COMPLETED, None
        case "failed":
            return RunState.FAILED, RunError(result.error_code or "engine_failed", result.error)
        case "max_turns_exceeded" | "budget_exceeded":
            return RunState.BUDGET_EXCEEDED, RunError(result.status, result.error)
        case _:
            return None, None


def _due(
    duty: DutySpec, state: RunState, error: RunError | None, checks: Sequence[ContractCheck]
) -> list[DueEscalation]:
    """The escalation rules a run's outcome meets (its state, error and contract checks)."""
    rules = duty_terms(duty).escalations
    due: list[DueEscalation] = []
    if state in (RunState.FAILED, RunState.BUDGET_EXCEEDED):
        code = error.code if error else ""
        facts = f"The run ended {state.value}: {code} {error.message if error else ''}".strip()
        wanted = {"failed", _FAILED_REASONS.get(code, "failed")}
        due += [DueEscalation(r, i, r.kind, facts) for i, r in enumerate(rules) if r.kind in wanted]
    if state is RunState.COMPLETED:
        quality = next((c for c in checks if c.check == "quality"), None)
        if quality is not None and quality.verdict == "failed":
            due += [DueEscalation(r, i, r.kind, f"Quality criteria {quality.detail}") for i, r in enumerate(rules)
                    if r.kind == "quality_failed"]  # fmt: skip
        judged = next((c for c in checks if c.check == "escalation"), None)
        holding = {item.name: item.note for item in judged.items if item.ok} if judged is not None else {}
        due += [DueEscalation(r, i, "condition", f"{r.condition}: {holding[r.condition]}") for i, r in enumerate(rules)
                if r.kind == "judged" and r.condition in holding]  # fmt: skip
    return due


def build_duty_outcomes(
    router: WorkerRouter, workers: Callable[[str, str], Worker | None], bus: EventBus | None
) -> DutyOutcomes:
    """The runtime's: checks with the router's model client, escalated tasks through the router;
    the outbox and channel bindings are connected once the channels run (`connect`)."""
    tasks = router.tasks

    async def route(req: RouteRequest, accepted: Callable[[str], None]) -> tuple[RunRecord, bool]:
        return await route_through(router, req, accepted)

    outcomes = DutyOutcomes(
        tasks,
        ContractChecks(router.llm),
        DutyDelivery(router.registry.root, tasks),
        Escalations(tasks, workers, route=route, plans=EscalationPlans(router.registry.root)),
        bus,
    )
    if bus is not None:
        bus.subscribe("outbox.*", outcomes.on_outbox)
    return outcomes
