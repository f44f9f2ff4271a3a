"""DutyScheduler: fires each active duty's triggers through the WorkerRouter, each slot exactly once.

- schedule: one APScheduler job per trigger, ticking on the trigger's slots; every tick fires the slots
  due since the last handled slot (persisted), chosen by the misfire policy, so start-up catch-up and a
  late tick are one path;
- condition: a job every `check_interval` reads the metric and fires only on the transition into true
  (the truth and the pending fire are persisted first, so a restart neither fires again while it
  stays true nor loses a transition it crashed before firing);
- event: one EventBus subscription matches events against every event trigger;
- manual: `run_manual`, for the API.

Exactly-once: a fire routes with the key `duty_id:trigger_id:scheduled_for:duty_version`; the task
lifecycle claims the key before anything runs, so a second fire of that slot gets the first run back.

SLA retries (`contract.sla.retries`): a fire that may need them is recorded in the trigger's state
before it routes, and each retry it then owes with its due time, before the backoff is waited out
(store.PendingRetry). `start` resumes what a stopped process left: a retry at its due time (at once
when overdue), a fire whose outcome it never saw by asking its key again. Each attempt has its own
key (`{key}:retry-{n}`), so a resumed attempt that had already run gets its run back, never a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from genworker.autonomy.duties.conditions import MetricSource, evaluate_rule
from genworker.autonomy.duties.contract import duty_terms
from genworker.autonomy.duties.errors import DutyNotFound, DutyStateError
from genworker.autonomy.duties.event_types import type_matches
from genworker.autonomy.duties.outcomes import DutyOutcomes, SlaBreach
from genworker.autonomy.duties.routing import route_through
from genworker.autonomy.duties.sla import SlaWatch
from genworker.autonomy.duties.slots import (
    aps_trigger,
    due_slots,
    duty_version,
    fire_key,
    first_run_time,
    select_slots,
)
from genworker.autonomy.duties.store import DutyStore, ExecutionRecord, PendingRetry
from genworker.bus import EventBus, Subscription
from genworker.bus.models import Event
from genworker.worker.governance.errors import GovernanceInputError
from genworker.worker.governance.evidence import NO_EVIDENCE, Evidence, evidence_from
from genworker.worker.router import RouteRequest
from genworker.worker.task import RunRecord, RunState
from genworker.workspace.models.duty import (
    ConditionTrigger,
    DutySpec,
    DutyStatus,
    EventTrigger,
    ManualTrigger,
    ScheduleTrigger,
)
from genworker.workspace.snapshot import Worker

__all__ = ["JOB_PREFIX", "DutyScheduler", "FireOutcome", "Route", "event_matches", "route_through"]

log = logging.getLogger("genworker.duties")

JOB_PREFIX: Final = "duty:"
INBOX_WRITTEN: Final = "inbox.item_written"

TriggerType = Literal["schedule", "event", "condition", "manual"]
Route = Callable[..., Awaitable[tuple[RunRecord, bool]]]  # (request, on_accepted=...) -> (run, created by it)
_RETRIED = frozenset({RunState.FAILED, RunState.BUDGET_EXCEEDED})  # an SLA's `retries` run these again


@dataclass(frozen=True, slots=True)
class FireOutcome:
    run: RunRecord
    created: bool  # False: the key had already made `run`, nothing ran
    key: str | None
    scheduled_for: datetime


def event_matches(trigger: EventTrigger, worker: Worker, event: Event) -> bool:
    """Same tenant (and worker, when the event names one), source and topic patterns, payload filter.

    `source` is a publisher pattern (fnmatch); without an `event_type` it may also be, as upstream
    genworker writes it, an event-type pattern (`event_types.type_matches`). Filter values may be
    upstream's expressions (`regex:`, `>= 3`... `filter_value_matches`). An ``inbox.item_written``
    event also matches as its item's sensor (`source_id`) and `event_type`."""
    if event.tenant_id != worker.tenant_id or event.worker_id not in (None, worker.worker_id):
        return False
    sources, types = [event.source], [event.topic]
    if event.topic == INBOX_WRITTEN:  # a sensor's item stands for the event it carries
        sources.append(str(event.payload.get("source_id") or ""))
        types.append(str(event.payload.get("event_type") or ""))
    if trigger.event_type is not None:
        if not any(fnmatch.fnmatchcase(s, trigger.source) for s in sources):
            return False
        if not any(fnmatch.fnmatchcase(t, trigger.event_type) for t in types):
            return False
    elif not (
        any(fnmatch.fnmatchcase(s, trigger.source) for s in sources)
        or any(type_matches(trigger.source, t) for t in types)
    ):
        return False
    return trigger.payload_matches(event.payload)


def _evidence(pending: PendingRetry, key: str) -> Evidence:
    return evidence_from(pending.evidence, f"the pending retry of {key}") if pending.evidence else NO_EVIDENCE


def job_id(worker: Worker, duty_id: str, trigger_id: str) -> str:
    return f"{JOB_PREFIX}{worker.tenant_id}/{worker.worker_id}/{duty_id}/{trigger_id}"


def _active(workers: Iterable[Worker]) -> Iterator[tuple[Worker, DutySpec]]:
    for worker in workers:
        for duty in worker.duties.values():
            if duty.status == DutyStatus.ACTIVE:
                yield worker, duty


class DutyScheduler:
    def __init__(
        self,
        store: DutyStore,
        route: Route,
        *,
        bus: EventBus | None = None,
        metrics: MetricSource | None = None,
        outcomes: DutyOutcomes | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        grace: timedelta = timedelta(seconds=60),
    ) -> None:
        self.store = store
        self.route = route
        self.bus = bus
        self.metrics = metrics
        self.clock = clock
        self.grace = grace  # a slot no older than this is on time, not missed
        self.last_error: dict[str, str] = {}
        self.outcomes = outcomes  # SLA breaches are announced and escalated through it
        self._workers: dict[tuple[str, str], Worker] = {}
        self._job_versions: dict[str, str] = {}
        self._running_since: dict[str, datetime] = {}  # job id -> when this scheduler started running it
        self._scheduler: AsyncIOScheduler | None = None
        self._subscription: Subscription | None = None
        self._fires: set[asyncio.Task[Any]] = set()
        self._stopping = asyncio.Event()  # ends the waits of retries (their state stays for the next start)

    # -- lifecycle ---------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def jobs(self) -> dict[str, Any]:
        if self._scheduler is None:
            return {}
        return {job.id: job for job in self._scheduler.get_jobs()}

    async def start(self, workers: Iterable[Worker]) -> None:
        """Start APScheduler on the running loop and subscribe to the bus; the first tick of each
        schedule trigger catches up what was missed while no runtime was running."""
        if self._scheduler is not None:
            return
        self._stopping.clear()
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.start()
        if self.bus is not None:
            self._subscription = self.bus.subscribe("*", self._on_event)
        self.sync(workers)
        await self.resume_retries()

    def sync(self, workers: Iterable[Worker]) -> None:
        """Follow the workspace: jobs for new or changed triggers, none for removed or inactive duties.
        An unchanged duty keeps its job (and its keys)."""
        self._workers = {w.key: w for w in workers}
        if self._scheduler is None:
            return
        wanted: dict[str, tuple[Worker, DutySpec, ScheduleTrigger | ConditionTrigger]] = {}
        for worker, duty in _active(self._workers.values()):
            for trigger in duty.triggers:
                if isinstance(trigger, ScheduleTrigger | ConditionTrigger):
                    wanted[job_id(worker, duty.duty_id, trigger.id)] = (worker, duty, trigger)
        for job in self._scheduler.get_jobs():
            if job.id.startswith(JOB_PREFIX) and job.id not in wanted:
                job.remove()
                self._job_versions.pop(job.id, None)
                self._running_since.pop(job.id, None)
        for ident, (worker, duty, trigger) in wanted.items():
            version = duty_version(duty)
            if self._job_versions.get(ident) == version and self._scheduler.get_job(ident) is not None:
                continue
            self._job_versions[ident] = version
            self._running_since[ident] = self.clock().astimezone(UTC)
            now = datetime.now(UTC)
            if isinstance(trigger, ScheduleTrigger):
                aps, is_schedule, first = aps_trigger(trigger), True, first_run_time(trigger, now)
            else:
                aps, is_schedule, first = IntervalTrigger(seconds=trigger.check_interval, timezone=UTC), False, now
            self._scheduler.add_job(
                self._job,
                aps,
                args=(worker.tenant_id, worker.worker_id, duty.duty_id, trigger.id, is_schedule),
                id=ident,
                name=f"duty {ident.removeprefix(JOB_PREFIX)}",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,  # a late tick still runs; tick() applies the misfire policy
                next_run_time=first,  # catch up / first check at once
                replace_existing=True,
            )

    async def stop(self, grace_s: float = 10.0) -> None:
        scheduler, self._scheduler = self._scheduler, None
        self._stopping.set()
        if self._subscription is not None:
            self._subscription.unsubscribe()
            self._subscription = None
        if scheduler is not None:
            scheduler.pause()
        self._running_since.clear()
        fires = list(self._fires)
        if fires:
            _, pending = await asyncio.wait(fires, timeout=grace_s)
            for task in pending:
                task.cancel()
        if scheduler is not None:
            scheduler.shutdown(wait=False)

    # -- firing ------------------------------------------------------------------

    def _find(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str) -> tuple[Worker, DutySpec, Any]:
        worker = self._workers.get((tenant_id, worker_id))
        duty = worker.duties.get(duty_id) if worker is not None else None
        if worker is None or duty is None or duty.status != DutyStatus.ACTIVE:
            raise DutyNotFound(f"no active duty {tenant_id}/{worker_id}/{duty_id}")
        for trigger in duty.triggers:
            if trigger.id == trigger_id:
                return worker, duty, trigger
        raise DutyNotFound(f"duty {duty_id!r} has no trigger {trigger_id!r}")

    async def _job(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, is_schedule: bool) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._fires.add(task)
        ident = f"{tenant_id}/{worker_id}/{duty_id}/{trigger_id}"
        try:
            if is_schedule:
                await self.tick(tenant_id, worker_id, duty_id, trigger_id)
            else:
                await self.check(tenant_id, worker_id, duty_id, trigger_id)
        except Exception as exc:  # one broken duty must not stop the others
            log.exception("[Duties] %s failed", ident)
            self.last_error[ident] = f"{datetime.now(UTC).isoformat()} {type(exc).__name__}: {exc}"
        else:
            self.last_error.pop(ident, None)
        finally:
            if task is not None:
                self._fires.discard(task)

    async def tick(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str) -> list[FireOutcome]:
        """Fire the schedule trigger's due slots (since the last handled one) under its misfire policy."""
        worker, duty, trigger = self._find(tenant_id, worker_id, duty_id, trigger_id)
        assert isinstance(trigger, ScheduleTrigger)
        now = self.clock()
        last = await asyncio.to_thread(self.store.arm, tenant_id, worker_id, duty_id, trigger_id, now)
        after, keep = last, 1
        if trigger.misfire_policy == "catch_up_bounded":
            after, keep = max(last, now - timedelta(seconds=trigger.catch_up_window)), trigger.catch_up_max_runs
        due = await asyncio.to_thread(due_slots, aps_trigger(trigger), after, now, keep=keep)
        since = self._running_since.get(f"{JOB_PREFIX}{tenant_id}/{worker_id}/{duty_id}/{trigger_id}")
        outcomes = []
        for slot in select_slots(trigger, due, now, self.grace, since):
            outcomes.append(await self._fire(worker, duty, trigger_id, "schedule", slot, slot.isoformat()))
        if due:
            await asyncio.to_thread(self.store.advance, tenant_id, worker_id, duty_id, trigger_id, due[-1])
        return outcomes

    async def check(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str) -> FireOutcome | None:
        """Read the condition's metric; fire only when it has just become true."""
        worker, duty, trigger = self._find(tenant_id, worker_id, duty_id, trigger_id)
        assert isinstance(trigger, ConditionTrigger)
        if self.metrics is None:
            return None
        value = await self.metrics.read(tenant_id, worker_id, trigger.metric, duty_id)
        is_true = evaluate_rule(trigger.rule, value)
        now = self.clock().astimezone(UTC).replace(microsecond=0)
        pending = await asyncio.to_thread(
            self.store.transition, tenant_id, worker_id, duty_id, trigger_id, is_true, now
        )
        if pending is None:
            return None
        # recorded before firing, fired under a key made from it: a crash in between fires it
        # on the next check, and the key keeps a second checker from running it twice
        outcome = await self._fire(worker, duty, trigger_id, "condition", pending, pending.isoformat())
        await asyncio.to_thread(self.store.settle, tenant_id, worker_id, duty_id, trigger_id, pending)
        return outcome

    async def on_event(self, event: Event) -> list[FireOutcome]:
        """Fire every event trigger `event` matches; the event id makes the key."""
        return await self._fire_events(event, self._event_matches(event))

    def _event_matches(self, event: Event) -> list[tuple[Worker, DutySpec, str]]:
        return [
            (worker, duty, trigger.id)
            for worker, duty in _active(self._workers.values())
            for trigger in duty.triggers
            if isinstance(trigger, EventTrigger) and event_matches(trigger, worker, event)
        ]

    async def _fire_events(self, event: Event, matches: list[tuple[Worker, DutySpec, str]]) -> list[FireOutcome]:
        slot = f"event-{event.event_id}"
        try:  # the event may carry an inferred action's evidence for the Policy Gate
            evidence = evidence_from(event.payload, f"event {event.event_id} payload") if matches else NO_EVIDENCE
        except GovernanceInputError as exc:
            log.error("[Duties] %s: no duty fired", exc)
            return []
        return [
            await self._fire(w, duty, trigger, "event", event.occurred_at, slot, evidence)
            for w, duty, trigger in matches
        ]

    async def _on_event(self, event: Event) -> None:
        matches = self._event_matches(event)
        if not matches:  # most events (every webhook fact, say) fire nothing: no task for them
            return
        # the bus mailbox must not wait for whole runs
        fire = self._fire_events(event, matches)
        task = asyncio.get_running_loop().create_task(fire, name=f"duty-event {event.event_id}")
        self._fires.add(task)
        task.add_done_callback(self._fires.discard)

    async def run_manual(
        self,
        worker: Worker,
        duty_id: str,
        trigger_id: str | None = None,
        idempotency_key: str | None = None,
        evidence: Evidence = NO_EVIDENCE,
    ) -> FireOutcome:
        """Run the duty now; a caller's `idempotency_key` makes a repeated call return the first run,
        and its `evidence` (an inferred action's) goes to the Policy Gate."""
        duty = worker.duties.get(duty_id)
        if duty is None:
            raise DutyNotFound(f"worker {worker.worker_id!r} has no duty {duty_id!r}")
        ids = [t.id for t in duty.triggers]
        if trigger_id is None:
            manual = [t.id for t in duty.triggers if isinstance(t, ManualTrigger)]
            trigger_id = (manual or ids or ["manual"])[0]
        elif trigger_id not in ids:
            raise DutyNotFound(f"duty {duty_id!r} has no trigger {trigger_id!r}")
        now = self.clock().astimezone(UTC)
        slot = f"manual-{idempotency_key}" if idempotency_key else None
        return await self._fire(worker, duty, trigger_id, "manual", now, slot, evidence)

    async def _fire(
        self,
        worker: Worker,
        duty: DutySpec,
        trigger_id: str,
        trigger_type: TriggerType,
        scheduled_for: datetime,
        slot: str | None,
        evidence: Evidence = NO_EVIDENCE,
    ) -> FireOutcome:
        key = fire_key(duty.duty_id, trigger_id, slot, duty_version(duty)) if slot is not None else None
        if key is None or trigger_type == "manual" or duty_terms(duty).sla.retries == 0:
            return await self._fire_once(worker, duty, trigger_id, trigger_type, scheduled_for, key, evidence)
        first = PendingRetry(attempt=0, scheduled_for=scheduled_for, trigger_type=trigger_type,
                             evidence=evidence.as_json())  # fmt: skip
        where = (worker.tenant_id, worker.worker_id, duty.duty_id, trigger_id, key)
        added = await asyncio.to_thread(self.store.watch_retries, *where, first)
        outcome = await self._fire_once(worker, duty, trigger_id, trigger_type, scheduled_for, key, evidence)
        if not outcome.created:  # a repeated fire: the one that made the run sees to its retries
            if added and outcome.run.terminal and outcome.run.state not in _RETRIED:
                await asyncio.to_thread(self.store.retries_done, *where)
            return outcome
        return await self._retry(worker, duty, trigger_id, key, first, outcome)

    async def _retry(
        self, worker: Worker, duty: DutySpec, trigger_id: str, key: str, pending: PendingRetry, outcome: FireOutcome
    ) -> FireOutcome:
        """Retry the fire under `key` (its attempt `pending.attempt` ended as `outcome`) while its SLA
        allows: each retry is recorded, with its due time, before its backoff is waited out."""
        sla = duty_terms(duty).sla
        where = (worker.tenant_id, worker.worker_id, duty.duty_id, trigger_id, key)
        evidence = _evidence(pending, key)
        while outcome.run.state in _RETRIED and pending.attempt < sla.retries:
            due = self.clock().astimezone(UTC) + timedelta(seconds=sla.retry_backoff_s)
            pending = pending.model_copy(update={"attempt": pending.attempt + 1, "due_at": due})
            await asyncio.to_thread(self.store.owe_retry, *where, pending)
            log.warning("[Duties] %s ended %s; retry %d of %d at %s", outcome.key, outcome.run.state,
                        pending.attempt, sla.retries, due.isoformat())  # fmt: skip
            if not await self._wait_until(due):
                return outcome  # stopping: the next start resumes the retry
            outcome = await self._fire_once(worker, duty, trigger_id, pending.trigger_type, pending.scheduled_for,
                                            pending.fire_key(key), evidence)  # fmt: skip
        await asyncio.to_thread(self.store.retries_done, *where)
        return outcome

    async def _wait_until(self, due: datetime) -> bool:
        """Wait until `due` (by `clock`); False when the scheduler stops first."""
        delay = (due - self.clock()).total_seconds()
        if delay > 0 and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)
        return not self._stopping.is_set()

    async def resume_retries(self) -> int:
        """The SLA retries a stopped process owed, each resumed in the background: at its due time
        (at once when overdue); a fire whose outcome was never seen is asked for it under its key."""
        resumed = 0
        for worker, duty in _active(self._workers.values()):
            try:
                state = await asyncio.to_thread(self.store.read_state, worker.tenant_id, worker.worker_id, duty.duty_id)
            except DutyStateError:
                log.exception("[Duties] the retries of %s/%s/%s cannot be resumed", *worker.key, duty.duty_id)
                continue
            for trigger_id, trigger in state.triggers.items():
                for key, pending in trigger.retries.items():
                    resume = self._resume(worker, duty, trigger_id, key, pending)
                    task = asyncio.get_running_loop().create_task(resume, name=f"duty-retry {key}")
                    self._fires.add(task)
                    task.add_done_callback(self._fires.discard)
                    resumed += 1
        if resumed:
            log.warning("[Duties] resuming %d duty fires with SLA retries a stopped process left", resumed)
        return resumed

    async def _resume(self, worker: Worker, duty: DutySpec, trigger_id: str, key: str, pending: PendingRetry) -> None:
        try:
            if pending.due_at is not None and not await self._wait_until(pending.due_at):
                return
            outcome = await self._fire_once(worker, duty, trigger_id, pending.trigger_type, pending.scheduled_for,
                                            pending.fire_key(key), _evidence(pending, key))  # fmt: skip
            await self._retry(worker, duty, trigger_id, key, pending, outcome)
        except Exception:  # one broken retry must not stop the others
            log.exception("[Duties] the retry of %s failed", key)

    async def _fire_once(
        self,
        worker: Worker,
        duty: DutySpec,
        trigger_id: str,
        trigger_type: TriggerType,
        scheduled_for: datetime,
        key: str | None,
        evidence: Evidence,
    ) -> FireOutcome:
        req = RouteRequest(
            worker.tenant_id,
            worker.worker_id,
            duty.action,
            "duty",
            source_id=duty.duty_id,
            conversational=False,
            duty_id=duty.duty_id,
            trigger_id=trigger_id,
            idempotency_key=key,
            scheduled_for=scheduled_for,
            evidence=evidence,
        )
        run, created = await self._route(worker, duty, req, trigger_id, scheduled_for)
        if created:
            record = ExecutionRecord(
                duty_id=duty.duty_id,
                trigger_id=trigger_id,
                trigger_type=trigger_type,
                scheduled_for=scheduled_for,
                key=key,
                run_id=run.run_id,
                state=str(run.state),
                fired_at=self.clock(),
            )
            retention = timedelta(seconds=duty.execution_log_retention)
            await asyncio.to_thread(self.store.append, worker.tenant_id, worker.worker_id, record, retention)
        else:
            log.info("[Duties] %s already ran as %s", key, run.run_id)
        return FireOutcome(run, created, key, scheduled_for)

    async def _route(
        self, worker: Worker, duty: DutySpec, req: RouteRequest, trigger_id: str, slot: datetime
    ) -> tuple[RunRecord, bool]:
        """Route the fire; with an SLA, watched against it (a breach goes to `outcomes`)."""
        sla = duty_terms(duty).sla
        outcomes = self.outcomes
        if not sla.timed or outcomes is None:
            return await self.route(req)

        async def breached(breach: SlaBreach, run_id: str) -> None:
            await outcomes.sla_breached(worker, duty, breach, run_id)

        watch = SlaWatch(sla, slot.astimezone(UTC), trigger_id, req.idempotency_key, breached, self.clock)
        watcher = asyncio.create_task(watch.watch(), name=f"sla {duty.duty_id}")
        try:
            return await self.route(req, on_accepted=watch.accept)
        finally:
            watch.finish()
            try:
                await watcher
            except Exception:  # a failed announcement must not fail the fire
                log.exception("[Duties] the SLA watch of %s failed", duty.duty_id)
