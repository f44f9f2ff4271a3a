"""ConflictService: the arbiter as a runtime runs it.

- plans: a routed run whose evidence has `planned_effects` is registered when it is admitted (the
  router's `plans`); a run's plan lives as long as its run (a run that ended releases its claims);
- the commit check sits in every worker's tool pipeline (`ToolRuntime.commits`);
- a conflict found or settled is announced on the bus (`conflict.detected`, `conflict.resolved`);
- a person decides an escalated case with `decide` (API, IM `/resolve_conflict`): its run's waiting
  call is then approved (it runs) or rejected (the run is cancelled). Deciding that confirmation
  directly settles the case the same way;
- the brief's "Conflicts and risks" section lists open cases with their options and the cases the
  system settled in the period; a call waiting on an open case is not listed again under "Needs
  your confirmation" (one card per conflict); two items of a brief whose goals exclude each other
  (the model judges, semantic.py) become one card too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import redis.asyncio as aioredis

from genworker.autonomy.briefs import BriefItem, DoneSource, ListSource, Option, Review
from genworker.autonomy.conflicts.arbiter import ConflictArbiter
from genworker.autonomy.conflicts.commit import CommitCheck, conflict_marker
from genworker.autonomy.conflicts.errors import ConflictNotOpen
from genworker.autonomy.conflicts.ledger import FileLedger, RedisLedger, ResourceLedger
from genworker.autonomy.conflicts.models import ConflictCase, EffectRecord, PlanState
from genworker.autonomy.conflicts.semantic import SemanticCheck
from genworker.autonomy.conflicts.store import ConflictStore
from genworker.bus import Event, EventBus, EventBusError, Subscription, new_event
from genworker.llm.client import LLMClient
from genworker.worker.confirmations.models import CONFIRMATION_DECIDED
from genworker.worker.confirmations.resolve import resolve
from genworker.worker.governance.evidence import PlannedEffect
from genworker.worker.lifecycle import TaskLifecycle, TaskLifecycleError
from genworker.worker.router import WorkerRouter
from genworker.worker.task import RunRef, RunState
from genworker.workspace.models.steward import ConflictConfig
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["CONFLICT_DETECTED", "CONFLICT_RESOLVED", "ConflictService", "build_conflicts"]

log = logging.getLogger("genworker.conflicts")

CONFLICT_DETECTED = "conflict.detected"
CONFLICT_RESOLVED = "conflict.resolved"
_CARD = conflict_marker("cc_")  # how a confirmation's reason names its conflict


def build_conflicts(
    root: Path, registry: WorkspaceRegistry, router: WorkerRouter, bus: EventBus, aredis: aioredis.Redis | None
) -> ConflictService:
    """The arbiter with the profile's ledger (Redis when shared, else files), wired into the router
    (plan time) and every worker's pipeline (commit time)."""
    ledger: ResourceLedger = RedisLedger(aredis) if aredis is not None else FileLedger(root)
    service = ConflictService(ConflictArbiter(ConflictStore(root), ledger, config_of(registry)), router, bus)
    service.arbiter.liveness = run_liveness(router.tasks)
    service.arbiter.announce = service.announce
    router.plans = service
    router.tools.commits.middleware = CommitCheck(service.arbiter, router.tools.effects)
    return service


def config_of(registry: WorkspaceRegistry) -> Callable[[str], ConflictConfig]:
    def config(tenant_id: str) -> ConflictConfig:
        state = registry.tenant(tenant_id)
        return state.tenant.conflict if state is not None else ConflictConfig()

    return config


def run_liveness(tasks: TaskLifecycle) -> Callable[[str, str, str], Any]:
    """A run-bound plan ends with its run: completed, or superseded by its continuation (an approval)
    -> succeeded; any other end -> failed."""

    async def ended(tenant_id: str, worker_id: str, plan_id: str) -> PlanState | None:
        try:
            run = await tasks.get_run(RunRef(tenant_id, worker_id, plan_id))
        except (TaskLifecycleError, ValueError):  # no such run: a plan declared over the API, say
            return None
        if not run.terminal:
            return None
        return PlanState.SUCCEEDED if run.state in (RunState.COMPLETED, RunState.SUPERSEDED) else PlanState.FAILED

    return ended


class ConflictService:
    def __init__(self, arbiter: ConflictArbiter, router: WorkerRouter, bus: EventBus | None = None) -> None:
        self.arbiter = arbiter
        self.router = router
        self.bus = bus
        self._subscription: Subscription | None = None

    @property
    def store(self) -> ConflictStore:
        return self.arbiter.store

    async def start(self) -> None:
        if self.bus is not None and self._subscription is None:
            self._subscription = self.bus.subscribe(CONFIRMATION_DECIDED, self._confirmation_decided)

    async def stop(self) -> None:
        if self._subscription is not None:
            self._subscription.unsubscribe()
            self._subscription = None

    # -- plan time (the router's PlanRegistry) -------------------------------------------------

    async def register(self, tenant_id: str, worker_id: str, run_id: str, planned: tuple[PlannedEffect, ...]) -> None:
        effects = [
            EffectRecord(run_id, tenant_id, worker_id, p.resource_key, p.operation, p.expected_version, p.reversibility)
            for p in planned
        ]
        await self.arbiter.plan(tenant_id, worker_id, run_id, effects)

    # -- a person's decision -------------------------------------------------------------------

    async def decide(
        self, tenant_id: str, conflict_id: str, decision: Literal["proceed", "drop"], by: str
    ) -> tuple[ConflictCase, dict[str, Any] | None]:
        """Settle an open case, then approve (proceed) or reject (drop) the call its run waits on, if
        any: (the case, what happened to that confirmation)."""
        case = await self.arbiter.decide(tenant_id, conflict_id, decision, by)
        waiting = await asyncio.to_thread(self._waiting_confirmation, case)
        if waiting is None:
            return case, None
        resolved = await resolve(
            self.router, tenant_id, case.worker_b_id, waiting, "approve" if decision == "proceed" else "reject", by
        )
        c = resolved.confirmation
        outcome: dict[str, Any] = {"confirmation_id": c.confirmation_id, "status": c.status}
        if resolved.run is not None:
            outcome |= {"run_id": resolved.run.run_id, "run_state": str(resolved.run.state)}
        return case, outcome

    def _waiting_confirmation(self, case: ConflictCase) -> str | None:
        if not case.worker_b_id:
            return None
        marker = conflict_marker(case.conflict_id)
        for c in self.router.confirmations.list(case.tenant_id, case.worker_b_id, "pending"):
            if c.run_id == case.plan_b_id and any(marker in r for r in c.reasons):
                return c.confirmation_id
        return None

    async def _confirmation_decided(self, event: Event) -> None:
        """A rejected call that waited on an open case drops it (an approved one settles it itself
        when it runs: the commit check sees the approval)."""
        if event.payload.get("status") != "rejected" or not event.tenant_id:
            return
        run_id = str(event.payload.get("run_id") or "")
        cases = await asyncio.to_thread(self.store.cases, event.tenant_id, status="open", plan_id=run_id)
        by = str(event.payload.get("decided_by") or "confirmation")
        for case in (c for c in cases if c.plan_b_id == run_id):
            try:
                await self.arbiter.decide(event.tenant_id, case.conflict_id, "drop", by)
            except ConflictNotOpen:  # settled meanwhile (in this process or another)
                continue

    # -- announcements and the brief -----------------------------------------------------------

    async def announce(self, case: ConflictCase, what: Literal["detected", "resolved"]) -> None:
        if self.bus is None:
            return
        topic = CONFLICT_DETECTED if what == "detected" else CONFLICT_RESOLVED
        payload = {k: v for k, v in case.as_json().items() if k not in ("schema_version", "detail")}
        event = new_event(
            topic, source="conflicts", tenant_id=case.tenant_id, worker_id=case.worker_b_id, payload=payload
        )
        try:
            await self.bus.publish(event)
        except EventBusError as exc:
            log.warning("[Conflicts] %s not published: %s", topic, exc)

    def semantic_review(self, llm: LLMClient) -> Review:
        """The brief's check for items whose goals exclude each other (semantic.py)."""
        return SemanticCheck(llm, self.store, self.arbiter.config_of).review

    def brief_items(self) -> DoneSource:
        """Open cases of the worker (with their options), and the cases the system settled since the
        last brief (what it did and why)."""

        async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
            cases = await asyncio.to_thread(self.store.cases, tenant_id, worker_id=worker_id)
            return [
                _brief_item(c)
                for c in cases
                if c.conflict_type == "resource" and (c.status == "open" or since is None or c.created_at >= since)
            ]

        return source


def one_card(confirmations: ListSource) -> ListSource:
    """The brief's confirmations without those waiting on a conflict: the conflict's card has them."""

    def rows(tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        return [
            r for r in confirmations(tenant_id, worker_id) if not any(_CARD in str(x) for x in r.get("reasons", ()))
        ]

    return rows


def _brief_item(case: ConflictCase) -> BriefItem:
    title = f"[Conflicted] plans {case.plan_a_id} and {case.plan_b_id} both change {case.resource_key}"
    risk: Literal["medium", "high"] = "high" if case.irreversible else "medium"
    if case.status == "open":
        options: tuple[Option, ...] = (
            Option(label=f"Let {case.plan_b_id} proceed", command=f"/resolve_conflict {case.conflict_id} proceed"),
            Option(label=f"Drop {case.plan_b_id}", command=f"/resolve_conflict {case.conflict_id} drop"),
        )
        detail = f"Suggested: escalate (a person decides). {case.detail}"
    else:
        options = (Option(label="See it", command=f"GET /api/v1/conflicts/{case.conflict_id}"),)
        settled = case.decision or case.resolution
        detail = f"{case.resolution} ({case.resolved_by or 'system'}: {settled}). {case.detail}"
    return BriefItem(
        item_id=f"conflict_{case.conflict_id}"[:64],
        section="conflicts",
        title=title,
        created_at=case.created_at,
        risk=risk,
        reversibility="irreversible" if case.irreversible else "reversible",
        priority="P1" if case.status == "open" else "P2",
        detail=detail,
        ref=case.conflict_id,
        options=options,
    )
