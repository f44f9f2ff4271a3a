"""WaitingService: park a plan on a `match_key`, wake it when a matching event arrives, and scan
for waits that timed out (every 60 s by default; the scan is a fallback, events come first).

Wake-up: the store moves WAITING -> GATED once (whoever else races gets nothing), storing the
event's payload and this instance (`gater`) in the same step; then a plan that needs a person's
confirmation stays GATED for the brief; every other one moves GATED -> RUNNING (the
compare-and-set is the claim) and `on_resume` routes it in the background (through governance
again: the gate re-checks it); when that returns the plan is DONE.
Timeout, per `on_timeout`: remind (back to WAITING for another wait), escalate (stays GATED and
goes to the brief's confirmation section), remind_then_escalate (remind once, then escalate),
close.
A plan that ends without resuming — cancelled by a person, or closed after its timeout — is
handed to `on_end` with the reason (the runtime ends the run that parked it).
Restarts: a plan moving to RUNNING records the instance that resumes it (`resumed_by`); at
start-up `recover` restarts the resume of RUNNING plans whose instance holds no live lease (the
resume is idempotent: a continuation that exists is not run again), claims and starts the plans
left GATED by an event or a manual resume (not waiting for a person) whose gater holds no live
lease, and hands every CANCELLED / CLOSED plan to `on_end` again, so `on_end` hears each plan at
least once and must be idempotent. A timeout records its scanner as `gater` too (cleared once an
escalation is announced): a sweep while running does the step again for a plan whose scanner
stopped between gating it and its step, for the workers this process owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from genworker.autonomy.inbox import InboxStore
from genworker.autonomy.inbox.topics import ITEM_WRITTEN
from genworker.autonomy.waiting.models import WaitingError, WaitingPlan, WaitingPlanNotFound, WaitingTransitionError
from genworker.autonomy.waiting.store import Owned, WaitingStore
from genworker.bus import Event, EventBus, Subscription
from genworker.ids import validate_match_key
from genworker.observability.metrics import record_waiting_plan
from genworker.worker.governance.policy_gate import DEFAULT_POLICY, Policy

__all__ = ["Alive", "EndHandler", "ResumeHandler", "TimeoutHandler", "WaitingService", "end_reason"]

log = logging.getLogger("genworker.waiting")

TimeoutOutcome = Literal["remind", "escalate", "close"]
ResumeHandler = Callable[[WaitingPlan], Awaitable[None]]
TimeoutHandler = Callable[[WaitingPlan, TimeoutOutcome], Awaitable[None]]
EndHandler = Callable[[WaitingPlan, str], Awaitable[None]]  # a plan that ended without resuming, and why
Alive = Callable[[str], bool]  # whether a runtime instance holds a live lease (blocking: run in a thread)


def _utc_now() -> datetime:
    return datetime.now(UTC)


async def _nothing(plan: WaitingPlan, outcome: TimeoutOutcome) -> None:
    log.info("[Waiting] %s/%s plan %s timed out: %s", plan.tenant_id, plan.worker_id, plan.plan_id, outcome)


async def _ended(plan: WaitingPlan, reason: str) -> None:
    log.info("[Waiting] %s/%s plan %s ended: %s", plan.tenant_id, plan.worker_id, plan.plan_id, reason)


def end_reason(plan: WaitingPlan, by: str = "") -> str:
    """Why a CANCELLED or CLOSED plan ended, as `on_end` hears it (and a parked run's note)."""
    if plan.state == "closed":
        return f"the wait for {plan.match_key} timed out and was closed"
    return f"the wait for {plan.match_key} was cancelled" + (f" by {by}" if by else "")


class WaitingService:
    def __init__(
        self,
        store: WaitingStore,
        on_resume: ResumeHandler,
        *,
        on_timeout: TimeoutHandler = _nothing,
        on_end: EndHandler = _ended,
        bus: EventBus | None = None,
        policy_of: Callable[[str, str], Policy] | None = None,
        inbox: InboxStore | None = None,
        scan_interval_s: float = 60.0,
        retention_s: float = 30 * 86_400.0,
        stop_grace_s: float = 30.0,
        clock: Callable[[], datetime] = _utc_now,
        owner: str | None = None,
    ) -> None:
        self.store = store
        self.owner = owner  # this runtime instance: recorded as `gater` / `resumed_by` on the plans it moves
        self.on_resume = on_resume
        self.on_timeout = on_timeout
        self.on_end = on_end
        self.scan_interval_s = scan_interval_s
        self.retention_s = retention_s  # ended plans older than this are deleted at start-up
        self.stop_grace_s = stop_grace_s
        self._bus = bus
        self._inbox = inbox
        self._policy_of = policy_of or (lambda tenant_id, worker_id: DEFAULT_POLICY)
        self._clock = clock
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()  # set to end the scan loop's pause early (stop, rescan)
        self._only: Owned | None = None
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None
        self._runs: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self.last_scan: dict[str, Any] = {}

    async def wait(
        self,
        tenant_id: str,
        worker_id: str,
        match_key: str,
        *,
        title: str = "",
        wait_for: timedelta | None = None,
        requires_confirmation: bool = False,
        resume: Mapping[str, Any] | None = None,
        plan_id: str | None = None,
    ) -> WaitingPlan:
        """Park a plan until an event with `match_key` arrives (default timeout: the policy's 24 h)."""
        policy = self._policy_of(tenant_id, worker_id)
        now = self._clock()
        plan = WaitingPlan(
            plan_id=plan_id or f"wait_{uuid.uuid4().hex[:16]}",
            tenant_id=tenant_id,
            worker_id=worker_id,
            match_key=validate_match_key(match_key),
            title=title,
            created_at=now,
            expires_at=now + (wait_for or timedelta(hours=policy.waiting_default_timeout_hours)),
            on_timeout=policy.waiting_timeout_action,
            requires_confirmation=requires_confirmation,
            resume=resume or {},
        )
        stored = await self.store.add(plan)
        record_waiting_plan("started")
        return stored

    async def on_event(
        self, tenant_id: str, match_key: str, event_id: str, payload: Mapping[str, Any] | None = None
    ) -> list[WaitingPlan]:
        """Wake the tenant's plans waiting on `match_key`; returns the plans this call woke. The
        event's `payload` is stored on each plan as it is gated, so its resumed run reads what
        arrived, even after a crash."""
        woken = await self.store.resume(tenant_id, match_key, event_id, self._clock(), event=payload, gater=self.owner)
        for _ in woken:
            record_waiting_plan("resumed")
        return [await self._run_gated(plan) for plan in woken]

    async def _run_gated(self, plan: WaitingPlan) -> WaitingPlan:
        if plan.requires_confirmation:
            await self.on_timeout(plan, "escalate")  # a person decides; the brief lists it
            return plan
        return await self._claim(plan) or plan  # None: someone else moved it on

    async def _claim(self, plan: WaitingPlan) -> WaitingPlan | None:
        """GATED -> RUNNING and start the run; None when another caller moved the plan first."""
        try:
            running = await self.store.transition(
                *plan.key, "gated", "running", now=self._clock(), resumed_by=self.owner
            )
        except WaitingTransitionError:
            return None
        self._start(running)
        return running

    def _start(self, plan: WaitingPlan) -> None:
        """Run the resumed plan in the background (an event's sender does not wait for the run)."""
        task = asyncio.create_task(self._finish(plan), name=f"waiting-resume:{'/'.join(plan.key)}")
        self._runs[plan.key] = task
        task.add_done_callback(lambda _: self._runs.pop(plan.key, None))

    async def _finish(self, plan: WaitingPlan) -> None:
        try:
            await self.on_resume(plan)
        except Exception:  # the run's own record has the failure; the plan is over either way
            log.exception("[Waiting] resuming %s/%s plan %s failed", plan.tenant_id, plan.worker_id, plan.plan_id)
        finally:
            with contextlib.suppress(WaitingError):
                await self.store.transition(*plan.key, "running", "done", now=self._clock())

    async def wait_runs(self, plans: Iterable[WaitingPlan]) -> None:
        """Wait until the resumed runs of `plans` have finished (for callers that want the result)."""
        tasks = [task for plan in plans if (task := self._runs.get(plan.key)) is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def resume_plan(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> WaitingPlan:
        """A person resumes a plan by hand: WAITING -> GATED -> RUNNING, or a held GATED plan -> RUNNING."""
        plan = await self.store.get(tenant_id, worker_id, plan_id)
        if plan is None:
            raise WaitingPlanNotFound(f"no waiting plan {plan_id!r} for worker {tenant_id}/{worker_id}")
        if plan.state == "waiting":
            plan = await self.store.transition(
                *plan.key, "waiting", "gated", now=self._clock(), gated_by="manual", event_id=by, gater=self.owner
            )
        running = await self.store.transition(
            tenant_id, worker_id, plan_id, "gated", "running", now=self._clock(), resumed_by=self.owner
        )
        self._start(running)
        return running

    async def cancel(self, tenant_id: str, worker_id: str, plan_id: str, by: str = "") -> WaitingPlan:
        """A person gives up a WAITING or GATED plan; `on_end` hears who."""
        plan = await self.store.get(tenant_id, worker_id, plan_id)
        if plan is None:
            raise WaitingPlanNotFound(f"no waiting plan {plan_id!r} for worker {tenant_id}/{worker_id}")
        if plan.state not in ("waiting", "gated"):
            raise WaitingTransitionError(
                f"plan {plan_id} is {plan.state}: only waiting or gated plans can be cancelled"
            )
        now = self._clock()
        cancelled = await self.store.transition(tenant_id, worker_id, plan_id, plan.state, "cancelled", now=now)
        record_waiting_plan("cancelled")
        await self.on_end(cancelled, end_reason(cancelled, by))
        return cancelled

    async def scan_once(self, limit: int = 1000, *, now: datetime | None = None) -> list[WaitingPlan]:
        """Handle every wait that timed out by `now` (default: the clock's now); returns the plans
        after their timeout step."""
        now = now or self._clock()
        due = await self.store.expire_due(now, limit, only=self._only, gater=self.owner)
        handled = [await self._timed_out(plan, now) for plan in due]
        self.last_scan = {"at": now.isoformat(), "expired": len(handled)}
        return handled

    async def _timed_out(self, plan: WaitingPlan, now: datetime) -> WaitingPlan:
        record_waiting_plan("timed_out")
        action = plan.on_timeout
        outcome: TimeoutOutcome
        if action == "remind" or (action == "remind_then_escalate" and plan.reminders == 0):
            hours = self._policy_of(plan.tenant_id, plan.worker_id).waiting_default_timeout_hours
            plan = await self.store.transition(
                *plan.key,
                "gated",
                "waiting",
                now=now,
                expires_at=now + timedelta(hours=hours),
                reminders=plan.reminders + 1,
            )
            outcome = "remind"
        elif action == "close":
            plan = await self.store.transition(*plan.key, "gated", "closed", now=now)
            outcome = "close"
        else:
            outcome = "escalate"
        await self.on_timeout(plan, outcome)
        if outcome == "close":
            await self.on_end(plan, end_reason(plan))
        elif outcome == "escalate" and plan.gater is not None:  # escalated: no gater left to recover for
            with contextlib.suppress(WaitingTransitionError):  # a person moved it on meanwhile
                plan = await self.store.transition(*plan.key, "gated", "gated", now=now, gater=None)
        return plan

    # -- restarts ---------------------------------------------------------------------------------

    async def recover(
        self, workers: Iterable[tuple[str, str]], alive: Alive, *, at_start: bool = True
    ) -> list[WaitingPlan]:
        """For the plans of `workers` ((tenant, worker) pairs): restart the resume of RUNNING plans
        left by a stopped instance, and start the GATED plans it gated but did not start (by an
        event or by hand, not held for a person). At start-up also delete ended plans older than
        `retention_s` and end the parked runs of CANCELLED / CLOSED plans again (a crash may have
        come between the two steps); the lease sweep (`at_start=False`, while this process runs)
        restarts and starts, and does again the timeout step of GATED plans a stopped instance's scan
        left halfway (for the workers this process owns). Returns the plans restarted, started or
        timed out again."""
        restarted: list[WaitingPlan] = []
        lives: dict[str, bool] = {}
        horizon = self._clock() - timedelta(seconds=self.retention_s)
        for tenant_id, worker_id in workers:
            try:
                plans = await self.store.list(tenant_id, worker_id)
                expired = [p for p in plans if p.ended_before(horizon)]
                if at_start and expired:  # the store deletes them (and only what did not change since)
                    forgotten = await self.store.forget_ended(tenant_id, worker_id, horizon)
                    log.info("[Waiting] %s/%s: deleted %d ended plans past retention", tenant_id, worker_id, forgotten)
                    plans = [p for p in plans if p not in expired]
            except WaitingError:  # one unreadable plan file: the worker's other plans wait for a fix
                log.exception("[Waiting] recovery skipped the plans of %s/%s", tenant_id, worker_id)
                continue
            for plan in plans:
                if plan.state == "running" and not await self._resumer_alive(plan, alive, lives):
                    self._start(plan)  # same plan version: the same continuation key, nothing runs twice
                    restarted.append(plan)
                elif plan.state == "gated" and await self._left_gated(plan, alive, lives, at_start):
                    if (running := await self._claim(plan)) is not None:
                        restarted.append(running)
                elif plan.state == "gated" and not at_start and await self._timeout_left(plan, alive, lives):
                    with contextlib.suppress(WaitingTransitionError):  # moved on meanwhile
                        restarted.append(await self._timed_out(plan, self._clock()))
                elif at_start and plan.state in ("cancelled", "closed"):
                    await self._end_again(plan)
        if restarted:
            log.warning("[Waiting] resumed %d plans a stopped process left gated or running", len(restarted))
        return restarted

    async def _resumer_alive(self, plan: WaitingPlan, alive: Alive, lives: dict[str, bool]) -> bool:
        """Whether a live instance is resuming `plan`: this one, or the live one it names."""
        return plan.key in self._runs or await self._alive(plan.resumed_by, alive, lives)

    async def _left_gated(self, plan: WaitingPlan, alive: Alive, lives: dict[str, bool], at_start: bool) -> bool:
        """Whether GATED `plan` runs without a person (woken by an event or resumed by hand, no
        confirmation) and the instance that gated it will not start it: a stopped one, or none."""
        if plan.gated_by not in ("event", "manual") or plan.requires_confirmation:
            return False
        return await self._gater_gone(plan, alive, lives, at_start)

    async def _timeout_left(self, plan: WaitingPlan, alive: Alive, lives: dict[str, bool]) -> bool:
        """Whether GATED `plan` was timed out by a scan whose instance stopped before the plan's
        step (remind, escalate, close) was done; only the worker's owner does it again, in a sweep."""
        if plan.gated_by != "timeout" or plan.gater is None:  # None: escalated, or by a build before gater
            return False
        if self._only is not None and not self._only(plan.tenant_id, plan.worker_id):
            return False
        return await self._gater_gone(plan, alive, lives, at_start=False)

    async def _gater_gone(self, plan: WaitingPlan, alive: Alive, lives: dict[str, bool], at_start: bool) -> bool:
        if plan.gater == self.owner:  # while this process runs, it is between its own two steps
            return at_start
        return not await self._alive(plan.gater, alive, lives)

    async def _alive(self, owner: str | None, alive: Alive, lives: dict[str, bool]) -> bool:
        if owner is None or owner == self.owner:
            return False
        if owner not in lives:
            lives[owner] = await asyncio.to_thread(alive, owner)
        return lives[owner]

    async def _end_again(self, plan: WaitingPlan) -> None:
        try:
            await self.on_end(plan, end_reason(plan))
        except Exception:  # the next start tries again
            log.exception("[Waiting] ending the run of %s/%s plan %s failed", *plan.key)

    # -- background: events and the scan --------------------------------------------------------

    async def start(self, only: Owned | None = None) -> None:
        """Subscribe to events and start the timeout scan; with `only`, the scan times out just the
        plans of the workers it accepts (those whose autonomy runs in this process), and `rescan`
        after that set changed. Events wake any worker's plans, in whichever process gets them."""
        if self._task is not None:
            return
        self._only = only
        self._stop.clear()
        if self._bus is not None:
            self._subscription = self._bus.subscribe("*", self._on_bus_event)
        self._task = asyncio.create_task(self._scan_loop(), name="waiting-timeout-scan")

    async def _on_bus_event(self, event: Event) -> None:
        key, event_id, payload = await self._facts(event)
        if event.tenant_id is None or not isinstance(key, str):
            return
        try:
            validate_match_key(key)
        except ValueError:
            log.warning("[Waiting] event %s carries an invalid match_key %r", event.event_id, key)
            return
        await self.on_event(event.tenant_id, key, event_id, payload)

    async def _facts(self, event: Event) -> tuple[object, str, Mapping[str, Any]]:
        """(match_key, event id, payload) of a bus event. A sensed fact (an inbox item, e.g. a
        webhook body) names the key in its payload's `match_key`, and its payload is the event's."""
        key = event.payload.get("match_key")
        if event.topic != ITEM_WRITTEN:
            return key, event.event_id, event.payload
        item_id = event.payload.get("item_id")  # the item id is the event id
        legacy = "match_key" not in event.payload  # from a build that did not send the key
        if (key is None and not legacy) or self._inbox is None or not isinstance(item_id, str):
            return key, str(item_id), event.payload
        item = None
        if event.tenant_id is not None and event.worker_id is not None:
            item = await self._inbox.get(event.tenant_id, event.worker_id, item_id)
        if item is None:
            return key, item_id, event.payload
        return item.payload.get("match_key"), item_id, item.payload

    def rescan(self) -> None:
        """Scan now instead of at the next interval (the workers this process owns changed)."""
        self._wake.set()

    async def _scan_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                await self.scan_once()
            except Exception:  # the scan must survive one bad plan file
                log.exception("[Waiting] timeout scan failed")
            # not asyncio.wait_for: on Python 3.11 it returns normally when the inner wait ends in the
            # step its caller is cancelled, and the loop would swallow the cancellation
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.scan_interval_s):
                    await self._wake.wait()

    async def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._subscription is not None:
            self._subscription.unsubscribe()
            self._subscription = None
        task, self._task = self._task, None
        if task is not None:  # it ends at its next step; a cancellation of this caller propagates
            await asyncio.wait([task])
            if not task.cancelled() and task.exception() is not None:
                log.error("[Waiting] the timeout scan ended with an error", exc_info=task.exception())
        runs = list(self._runs.values())
        if runs:
            _, pending = await asyncio.wait(runs, timeout=self.stop_grace_s)
            for task in pending:  # the run's record is recovered as interrupted at the next start
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await self.store.aclose()
