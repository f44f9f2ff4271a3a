"""ConflictArbiter (Steward): resource conflicts between plans, found when a plan is made and again
right before it changes anything, and resolved in the tenant's `default_resolution_order`.

- **Plan time** (`plan`): a plan's effects are compared with every live claim on the same resource
  key. Two plans on one key conflict; the first resolution of the order that applies settles it:
  `merge` (the same operation: one change serves both), `serialize` (the later plan commits only
  after the earlier one has), `replan` (both go on; whichever commits second finds the version moved
  and re-plans), `escalate` (a person decides). A conflict involving an irreversible effect always
  escalates. The plan then claims its keys, with the version it read.
- **Commit time** (`commit`, called by the tool pipeline's commit check right before the side
  effect): under the key's lock (file lock, or Redis in the shared profile, `lock_ttl_seconds`), a
  serialized plan first waits for the plan ahead of it; then a version the plan read that is no
  longer the resource's is merged (the same operation was committed), re-planned, or escalated; an
  escalation still open stops the call until a person decides. Only then does the change run, still
  under the lock, and the new version is recorded. So of two plans racing on one key one commits and
  the other is serialized, re-planned or escalated: never both on the same state.

Plans follow Steward's state machine (models.py): a plan with a conflict is CONFLICTED and returns to
GATED once the conflict is resolved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Generic, Literal, TypeVar

from genworker.autonomy.conflicts.errors import ConflictNotOpen, IllegalPlanTransition, ResourceBusy
from genworker.autonomy.conflicts.ledger import ResourceLedger
from genworker.autonomy.conflicts.models import (
    ConflictCase,
    EffectRecord,
    PlanRecord,
    PlanState,
    Resolution,
    ResourceState,
)
from genworker.autonomy.conflicts.store import ConflictStore, new_conflict_id
from genworker.workspace.models.steward import ConflictConfig

__all__ = [
    "Committed",
    "ConflictArbiter",
    "Escalated",
    "Merged",
    "PlanLiveness",
    "Replan",
    "Verdict",
]

log = logging.getLogger("genworker.conflicts")

T = TypeVar("T")
PlanLiveness = Callable[[str, str, str], Awaitable[PlanState | None]]
"""(tenant, worker, plan id) -> the end state of a plan whose run has ended, None while it runs (or
when nothing is known of it)."""
Announce = Callable[[ConflictCase, Literal["detected", "resolved"]], Awaitable[None]]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Committed(Generic[T]):
    result: T


@dataclass(frozen=True, slots=True)
class Merged:
    case: ConflictCase
    version: str | None


@dataclass(frozen=True, slots=True)
class Replan:
    case: ConflictCase


@dataclass(frozen=True, slots=True)
class Escalated:
    case: ConflictCase


Verdict = Committed[T] | Merged | Replan | Escalated
Done = Callable[[T], tuple[bool, str | None]]  # the change's result -> (it took effect, the new version)


class ConflictArbiter:
    def __init__(
        self,
        store: ConflictStore,
        ledger: ResourceLedger,
        config_of: Callable[[str], ConflictConfig],
        *,
        liveness: PlanLiveness | None = None,
        announce: Announce | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.store = store
        self.ledger = ledger
        self.config_of = config_of
        self.liveness = liveness
        self.announce = announce
        self.clock = clock

    # -- plan time -----------------------------------------------------------------------------

    async def plan(
        self,
        tenant_id: str,
        worker_id: str,
        plan_id: str,
        effects: Sequence[EffectRecord],
        *,
        run_bound: bool = True,
        ttl_s: int | None = None,
    ) -> tuple[PlanRecord, list[ConflictCase]]:
        """Register a plan's effects and detect its conflicts with the plans claiming the same keys;
        again for a plan already registered (re-planned: its effects are replaced). A declared plan
        (`run_bound=False`) expires after `ttl_s` (default `declared_plan_ttl_seconds`) without a
        commit; declaring it again renews it. IllegalPlanTransition for a plan that has ended."""
        known = await asyncio.to_thread(self.store.plan, tenant_id, worker_id, plan_id)
        if known is not None and known.expired(self.clock()):
            await self._expire(known)
            known = await asyncio.to_thread(self.store.plan, tenant_id, worker_id, plan_id)
        if known is not None and known.state.terminal:
            raise IllegalPlanTransition(f"plan {plan_id} has ended ({known.state}); declare a new plan")
        cfg = self.config_of(tenant_id)
        mine = tuple(replace(e, plan_id=plan_id, tenant_id=tenant_id, worker_id=worker_id) for e in effects)
        lease = None if run_bound else ttl_s or cfg.declared_plan_ttl_seconds
        await self._move(tenant_id, worker_id, plan_id, PlanState.PLANNED, "planned", mine, run_bound, lease)
        if not cfg.enabled:
            return await self._move(tenant_id, worker_id, plan_id, PlanState.GATED, "conflicts off"), []
        cases: list[ConflictCase] = []
        for key in sorted({e.resource_key for e in mine}):
            async with self.ledger.lock(tenant_id, key, cfg.lock_ttl_seconds, cfg.lock_ttl_seconds):
                state = await self.ledger.state(tenant_id, key)
                read = state.version
                if read is None:  # a baseline (the version the plan read, if it says): a later change shows
                    said = [e.expected_version for e in mine if e.resource_key == key and e.expected_version]
                    read = said[0] if said else _new_version()
                    await self.ledger.committed(tenant_id, key, read, "", "")
                for effect in (e for e in mine if e.resource_key == key):
                    if cfg.detect_at_plan_time:
                        for other in await self._live_claims(state, plan_id):
                            cases.append(await self._case(cfg, other, effect, "plan", state))
                    await self.ledger.claim(replace(effect, expected_version=effect.expected_version or read))
        if not any(c.status == "open" for c in cases):
            with contextlib.suppress(IllegalPlanTransition):  # re-planned while running: it stays running
                await self._move(tenant_id, worker_id, plan_id, PlanState.GATED, "no conflict open")
        plan = await asyncio.to_thread(self.store.plan, tenant_id, worker_id, plan_id)
        assert plan is not None
        return plan, cases

    async def finish(self, tenant_id: str, worker_id: str, plan_id: str, state: PlanState, reason: str = "") -> None:
        """A plan ended: its claims go, so no plan waits for it any more."""
        plan = await asyncio.to_thread(self.store.plan, tenant_id, worker_id, plan_id)
        if plan is None:
            return
        cfg = self.config_of(tenant_id)
        for key in sorted({e.resource_key for e in plan.effects}):
            async with self.ledger.lock(tenant_id, key, cfg.lock_ttl_seconds, cfg.lock_ttl_seconds):
                await self.ledger.unclaim(tenant_id, key, plan_id)
        await self._end(tenant_id, worker_id, plan_id, state, reason)

    async def expire_if_due(self, tenant_id: str, worker_id: str, plan_id: str) -> PlanRecord | None:
        """The plan as stored, expired first when it is a declared plan past its `expires_at`."""
        plan = await asyncio.to_thread(self.store.plan, tenant_id, worker_id, plan_id)
        if plan is None or not plan.expired(self.clock()):
            return plan
        await self._expire(plan)
        return await asyncio.to_thread(self.store.plan, tenant_id, worker_id, plan_id)

    async def _expire(self, plan: PlanRecord) -> None:
        why = f"expired: no commit within its ttl of {plan.ttl_s} s (until {plan.expires_at:%Y-%m-%d %H:%M:%S} UTC)"
        log.info("[Conflicts] declared plan %s/%s %s", plan.worker_id, plan.plan_id, why)
        await self.finish(plan.tenant_id, plan.worker_id, plan.plan_id, PlanState.FAILED, why)

    # -- commit time ---------------------------------------------------------------------------

    async def commit(
        self, effect: EffectRecord, act: Callable[[], Awaitable[T]], done: Done[T], *, approved: bool = False
    ) -> Verdict[T]:
        """Run `act` (the side effect) if no conflict stops it; `approved`: a person approved this
        very call, which settles the plan's open escalations on this key."""
        t, key = effect.tenant_id, effect.resource_key
        cfg = self.config_of(t)
        if not cfg.enabled or not cfg.detect_at_commit_time:
            return Committed(await act())
        await self._ensure_plan(effect)
        waited = await self._wait_turn(cfg, effect)
        if waited is not None:
            return waited
        try:
            async with self.ledger.lock(t, key, cfg.lock_ttl_seconds, cfg.lock_ttl_seconds):
                state = await self.ledger.state(t, key)
                stop = await self._check(cfg, effect, state, approved)
                if stop is not None:
                    return stop
                await self._move(t, effect.worker_id, effect.plan_id, PlanState.RUNNING, f"commits {effect.operation}")
                result = await act()
                took_effect, version = done(result)
                if took_effect:
                    await self._committed(effect, version)
                return Committed(result)
        except ResourceBusy as exc:  # another plan holds the key past the lock's TTL
            return Escalated(await self._case(cfg, None, effect, "commit", None, why=str(exc)))

    async def _check(
        self, cfg: ConflictConfig, effect: EffectRecord, state: ResourceState, approved: bool
    ) -> Merged | Replan | Escalated | None:
        t, plan_id = effect.tenant_id, effect.plan_id
        cases = await asyncio.to_thread(self.store.cases, t, plan_id=plan_id)
        on_key = [c for c in cases if c.resource_key == effect.resource_key]
        for case in (c for c in on_key if c.status == "open" and c.plan_b_id == plan_id):
            if not approved:
                return Escalated(case)
            await self.decide(t, case.conflict_id, "proceed", "approval of the call")
        if any(c.status == "dropped" and c.plan_b_id == plan_id for c in on_key):
            dropped = next(c for c in on_key if c.status == "dropped" and c.plan_b_id == plan_id)
            return Replan(dropped)
        proceed = any(c.decision == "proceed" and c.plan_b_id == plan_id for c in on_key)
        known = {c.plan_a_id for c in on_key} | {c.plan_b_id for c in on_key}
        for other in await self._live_claims(state, plan_id):
            if other.committed or other.plan_id in known:
                continue
            if effect.irreversible or other.irreversible:  # found only now: both are live on this key
                return Escalated(await self._case(cfg, other, effect, "commit", state))
        claim = state.claims.get(plan_id)
        expected = effect.expected_version or (claim.expected_version if claim is not None else None)
        stale = expected is not None and state.version is not None and expected != state.version
        if not stale or state.committed_by == plan_id or proceed:
            return None
        return await self._stale(cfg, effect, state, expected)

    async def _stale(
        self, cfg: ConflictConfig, effect: EffectRecord, state: ResourceState, expected: str | None
    ) -> Merged | Replan | Escalated:
        """The resource changed since the plan read it (another plan committed, or the caller's
        version is old): merged when the same operation was committed, else re-planned; escalated
        when irreversible or the order allows neither."""
        why = f"{effect.resource_key} is at version {state.version}, the plan read {expected}"
        first, operation = state.committed_by or "unknown", state.committed_operation or ""
        other = EffectRecord(first, effect.tenant_id, "", effect.resource_key, operation)
        for resolution in cfg.default_resolution_order:
            if effect.irreversible:
                break
            if resolution == "merge" and state.committed_operation == effect.operation:
                case = await self._case(cfg, other, effect, "commit", state, resolution="merge", why=why)
                await self.ledger.claim(replace(effect, expected_version=state.version, committed=True))
                return Merged(case, state.version)
            if resolution == "replan":
                case = await self._case(cfg, other, effect, "commit", state, resolution="replan", why=why)
                claim = state.claims.get(effect.plan_id)
                if claim is not None:  # told of the new state: its next attempt is planned from it
                    await self.ledger.claim(replace(claim, expected_version=state.version))
                return Replan(case)
        return Escalated(await self._case(cfg, other, effect, "commit", state, resolution="escalate", why=why))

    async def _wait_turn(self, cfg: ConflictConfig, effect: EffectRecord) -> Escalated | None:
        """A serialized plan waits (without the lock) until the plans ahead of it on this key have
        committed or ended; at most `lock_ttl_seconds`, then a person decides."""
        t, key = effect.tenant_id, effect.resource_key
        cases = await asyncio.to_thread(self.store.cases, t, plan_id=effect.plan_id)
        ahead = {c.plan_a_id for c in cases if c.resolution == "serialize" and c.plan_b_id == effect.plan_id}
        ahead = {p for p in ahead if p != effect.plan_id and any(c.resource_key == key for c in cases)}
        if not ahead:
            return None
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + cfg.lock_ttl_seconds, 0.005
        while True:
            state = await self.ledger.state(t, key)
            waiting = [c for p, c in state.claims.items() if p in ahead and not c.committed]
            if not waiting:
                return None
            live = await self._still_live(waiting)
            if not live:
                return None
            if loop.time() >= deadline:
                why = f"plan {live[0].plan_id} ahead of it on {key} did not commit within {cfg.lock_ttl_seconds} s"
                case = await self._case(cfg, live[0], effect, "commit", state, resolution="escalate", why=why)
                return Escalated(case)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    # -- a person's decision -------------------------------------------------------------------

    async def decide(
        self, tenant_id: str, conflict_id: str, decision: Literal["proceed", "drop"], by: str
    ) -> ConflictCase:
        """Settle an escalated case: `proceed` lets the later plan (B) commit, `drop` ends it.
        ConflictNotOpen when it was already settled (the first decision wins)."""
        if decision not in ("proceed", "drop"):
            raise ValueError(f"decision must be 'proceed' or 'drop', got {decision!r}")
        now = self.clock()

        def settle(case: ConflictCase) -> ConflictCase:
            if case.status != "open":
                settled = case.decision or case.resolution
                raise ConflictNotOpen(f"conflict {conflict_id} is already {case.status} ({settled})")
            status: Literal["resolved", "dropped"] = "resolved" if decision == "proceed" else "dropped"
            return replace(case, status=status, resolved_by="user", resolved_at=now, decision=decision, decided_by=by)

        case = await asyncio.to_thread(self.store.update_case, tenant_id, conflict_id, settle)
        log.info("[Conflicts] %s %s by %s: plan %s", conflict_id, decision, by, case.plan_b_id)
        worker_id, plan_id = case.worker_b_id, case.plan_b_id
        if case.conflict_type == "semantic":  # two brief items, not plans: nothing moves
            await self._announce(case, "resolved")
            return case
        if decision == "proceed":
            await self._move(tenant_id, worker_id, plan_id, PlanState.GATED, f"{conflict_id}: {by} lets it proceed")
        else:
            await self.finish(tenant_id, worker_id, plan_id, PlanState.FAILED, f"{conflict_id}: dropped by {by}")
        await self._announce(case, "resolved")
        return case

    # -- internals -----------------------------------------------------------------------------

    async def _case(
        self,
        cfg: ConflictConfig,
        earlier: EffectRecord | None,
        later: EffectRecord,
        stage: Literal["plan", "commit"],
        state: ResourceState | None,
        *,
        resolution: Resolution | None = None,
        why: str = "",
    ) -> ConflictCase:
        """Record a conflict between `earlier` (plan A) and `later` (plan B), resolved by the first
        applicable resolution of the order unless one is given; an escalation stays open."""
        irreversible = later.irreversible or (earlier is not None and earlier.irreversible)
        if resolution is None:
            resolution = _resolution(cfg, earlier, later)
        a = earlier or EffectRecord("unknown", later.tenant_id, "", later.resource_key, "")
        detail = why or _explain(resolution, a, later, irreversible)
        now = self.clock()
        system = resolution != "escalate"
        case = ConflictCase(
            conflict_id=new_conflict_id(),
            tenant_id=later.tenant_id,
            plan_a_id=a.plan_id,
            plan_b_id=later.plan_id,
            conflict_type="resource",
            resolution=resolution,
            status="resolved" if system else "open",
            created_at=now,
            resource_key=later.resource_key,
            worker_a_id=a.worker_id,
            worker_b_id=later.worker_id,
            operation_a=a.operation,
            operation_b=later.operation,
            irreversible=irreversible,
            detected_at=stage,
            detail=detail,
            resolved_by="system" if system else None,
            resolved_at=now if system else None,
        )
        await asyncio.to_thread(self.store.add_case, case)
        log.info("[Conflicts] %s on %s: %s (%s)", case.conflict_id, case.resource_key, resolution, detail)
        with contextlib.suppress(IllegalPlanTransition):  # an ended plan stays as it is
            t, w, p = later.tenant_id, later.worker_id, later.plan_id
            await self._move(t, w, p, PlanState.CONFLICTED, f"{case.conflict_id}: {detail}")
            if system:  # back to the gate at once: the resolution is the system's
                await self._move(t, w, p, PlanState.GATED, f"{case.conflict_id}: {resolution}")
        await self._announce(case, "detected" if not system else "resolved")
        return case

    async def _announce(self, case: ConflictCase, what: Literal["detected", "resolved"]) -> None:
        if self.announce is None:
            return
        try:
            await self.announce(case, what)
        except Exception:  # the case is stored: telling about it is best effort
            log.exception("[Conflicts] announcing %s failed", case.conflict_id)

    async def _live_claims(self, state: ResourceState, plan_id: str) -> list[EffectRecord]:
        """Other plans' claims on the key, dropping those whose run has ended (caller holds the lock)."""
        others = [c for p, c in state.claims.items() if p != plan_id]
        live = await self._still_live(others)
        for gone in (c for c in others if c not in live):
            await self.ledger.unclaim(gone.tenant_id, gone.resource_key, gone.plan_id)
        return live

    async def _still_live(self, claims: Sequence[EffectRecord]) -> list[EffectRecord]:
        """The claims whose plan goes on: a declared plan until it ends or expires, a run's plan while
        its run does (`liveness`)."""
        live: list[EffectRecord] = []
        if not claims:
            return live
        plans = await asyncio.to_thread(self._plans_of, claims)  # one thread hop for all of them
        for claim, plan in zip(claims, plans, strict=True):
            t, w, p = claim.tenant_id, claim.worker_id, claim.plan_id
            if plan is not None and not plan.run_bound:
                if plan.expired(self.clock()):
                    why = f"expired: no commit within its ttl of {plan.ttl_s} s"
                    await self._end(t, w, p, PlanState.FAILED, why)
                elif not plan.state.terminal:
                    live.append(claim)
                continue
            ended = await self.liveness(t, w, p) if self.liveness is not None else None
            if ended is None:
                live.append(claim)
            else:
                await self._end(t, w, p, ended, "its run ended")
        return live

    def _plans_of(self, claims: Sequence[EffectRecord]) -> list[PlanRecord | None]:
        return [self.store.plan(c.tenant_id, c.worker_id, c.plan_id) if c.worker_id else None for c in claims]

    async def _committed(self, effect: EffectRecord, version: str | None) -> None:
        new = version or _new_version()
        claim = replace(effect, expected_version=new, committed=True)
        await self.ledger.committed(effect.tenant_id, effect.resource_key, new, effect.plan_id, effect.operation, claim)

    async def _ensure_plan(self, effect: EffectRecord) -> None:
        """A run that changes a resource without a plan declared for it is a plan from its first call."""

        def register(plan: PlanRecord | None) -> PlanRecord:
            if plan is None:
                plan = PlanRecord(effect.plan_id, effect.tenant_id, effect.worker_id, PlanState.NEW, self.clock())
                plan = plan.moved(PlanState.PLANNED, self.clock(), "first change").moved(PlanState.GATED, self.clock())
            if all(e.resource_key != effect.resource_key for e in plan.effects):
                plan = replace(plan, effects=(*plan.effects, effect))
            return plan

        await asyncio.to_thread(self.store.update_plan, effect.tenant_id, effect.worker_id, effect.plan_id, register)

    async def _move(
        self,
        tenant_id: str,
        worker_id: str,
        plan_id: str,
        target: PlanState,
        reason: str,
        effects: tuple[EffectRecord, ...] | None = None,
        run_bound: bool = True,
        lease_s: int | None = None,
    ) -> PlanRecord:
        """`lease_s`: a declared plan's ttl, from now. A declared plan's commit renews its lease."""
        now = self.clock()

        def move(plan: PlanRecord | None) -> PlanRecord:
            if plan is None:
                plan = PlanRecord(plan_id, tenant_id, worker_id, PlanState.NEW, now, run_bound=run_bound)
            if effects is not None:
                plan = replace(plan, effects=effects)
            if lease_s is not None:
                plan = replace(plan, ttl_s=lease_s, expires_at=now + timedelta(seconds=lease_s))
            elif target == PlanState.RUNNING and plan.ttl_s is not None and not plan.run_bound:
                plan = replace(plan, expires_at=now + timedelta(seconds=plan.ttl_s))
            if plan.state == target or (target == PlanState.PLANNED and plan.state != PlanState.NEW):
                return plan  # planned again (re-planned): its effects are replaced, its state stays
            if target == PlanState.RUNNING and plan.state == PlanState.CONFLICTED:
                plan = plan.moved(PlanState.GATED, now, "resolved")
            return plan.moved(target, now, reason)

        return await asyncio.to_thread(self.store.update_plan, tenant_id, worker_id, plan_id, move)

    async def _end(self, tenant_id: str, worker_id: str, plan_id: str, state: PlanState, reason: str) -> None:
        if not worker_id:
            return
        now = self.clock()

        def end(plan: PlanRecord | None) -> PlanRecord:
            if plan is None:
                plan = PlanRecord(plan_id, tenant_id, worker_id, PlanState.NEW, now)
            if plan.state.terminal:
                return plan
            if state == PlanState.FAILED or plan.state == PlanState.CONFLICTED:
                return plan.moved(PlanState.FAILED, now, reason)  # a conflict left open: its change never ran
            while plan.state != PlanState.RUNNING:  # NEW -> PLANNED -> GATED -> RUNNING, WAITING -> RUNNING
                plan = plan.moved(_TOWARDS_RUNNING[plan.state], now, reason)
            return plan.moved(state, now, reason)

        await asyncio.to_thread(self.store.update_plan, tenant_id, worker_id, plan_id, end)


_TOWARDS_RUNNING = {
    PlanState.NEW: PlanState.PLANNED,
    PlanState.PLANNED: PlanState.GATED,
    PlanState.GATED: PlanState.RUNNING,
    PlanState.WAITING: PlanState.RUNNING,
}


def _new_version() -> str:
    """A version for a change whose tool reports none: unique is all a version needs to be."""
    return f"gw:{secrets.token_hex(6)}"


def _resolution(cfg: ConflictConfig, earlier: EffectRecord | None, later: EffectRecord) -> Resolution:
    if later.irreversible or (earlier is not None and earlier.irreversible):
        return "escalate"  # auto_escalate_on_irreversible_conflict cannot be off
    for resolution in cfg.default_resolution_order:
        if resolution == "merge" and (earlier is None or earlier.operation != later.operation):
            continue
        return resolution
    return "escalate"


def _explain(resolution: Resolution, a: EffectRecord, b: EffectRecord, irreversible: bool) -> str:
    both = f"plans {a.plan_id} ({a.operation}) and {b.plan_id} ({b.operation}) both change {b.resource_key}"
    match resolution:
        case "merge":
            return f"{both}: the same change, made once"
        case "serialize":
            return f"{both}: {b.plan_id} commits only after {a.plan_id}, against the state {a.plan_id} leaves"
        case "replan":
            return f"{both}: whichever commits second re-plans from the new state"
        case "escalate":
            why = "an irreversible change" if irreversible else "no automatic resolution applies"
            return f"{both}: {why}; a person decides whether {b.plan_id} proceeds"
