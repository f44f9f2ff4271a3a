"""Confirmations: gated tasks waiting for a person — stored per worker, announced, reminded,
escalated, and approved or rejected.

An approved confirmation is the `approval_ref` a new run carries; the governance stage only
accepts it for the same gated policy (`gate_ref`), so one approval cannot unlock other work, and
the approved run never comes back to the gate. Every request is announced (a
``task.confirmation_requested`` inbox item and event); one left unanswered is reminded every
`remind_every` and escalated once after `escalate_after` (a P0 inbox item, naming the worker's
`reports_to`), and it stays pending until a person decides: nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from genworker.autonomy.inbox.models import InboxWriter, new_item
from genworker.events import EventBus, EventBusError, new_event
from genworker.fsutil import striped_lock, write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.governance import Approval
from genworker.worker.governance.evidence import evidence_from

if TYPE_CHECKING:  # the router imports this module
    from genworker.autonomy.briefs import BriefService
    from genworker.worker.router import RouteRequest, WorkerRouter
    from genworker.worker.task import RunRecord

__all__ = [
    "CONFIRMATION_CLOSED",
    "CONFIRMATION_DECIDED",
    "CONFIRMATION_ESCALATED",
    "CONFIRMATION_REMINDED",
    "CONFIRMATION_REQUESTED",
    "LANGGRAPH_INTERRUPT",
    "POLICY_TIMEOUT",
    "Confirmation",
    "ConfirmationDecided",
    "ConfirmationError",
    "ConfirmationNotFound",
    "ConfirmationNotifier",
    "ConfirmationPolicy",
    "ConfirmationReminders",
    "ConfirmationStore",
    "InboxConfirmationNotifier",
    "Notify",
    "Reminder",
    "Resolution",
    "cancel_waiting_run",
    "resolve",
    "through_briefs",
]

log = logging.getLogger("genworker.confirmations")

SCHEMA_VERSION = 2  # 2 added reminders, routing fields and tool confirmations; 1 still reads
_READABLE: Final = frozenset({1, SCHEMA_VERSION})
Status = Literal["pending", "approved", "rejected"]
TimeoutAction = Literal["remind", "escalate", "remind_then_escalate", "close"]
ReminderKind = Literal["remind", "escalate", "close"]
CONFIRMATION_REQUESTED: Final = "task.confirmation_requested"
CONFIRMATION_REMINDED: Final = "task.confirmation_reminded"
CONFIRMATION_ESCALATED: Final = "task.confirmation_escalated"
CONFIRMATION_DECIDED: Final = "task.confirmation_decided"
CONFIRMATION_CLOSED: Final = "task.confirmation_closed"
POLICY_TIMEOUT: Final = "policy:timeout"
LANGGRAPH_INTERRUPT: Final = "langgraph.interrupt"  # the inbox item of a graph interrupt (seed §3.4)

Notify = Callable[["Confirmation", Literal["P0", "P1"], str], Awaitable[None]]
"""(confirmation, priority, text): tell a person now, within the interruption budget
(`through_briefs`); P0 (an escalation) always gets through."""


class ConfirmationError(Exception):
    """Base of every confirmation error (alone: a confirmation file that cannot be read)."""


class ConfirmationNotFound(ConfirmationError, LookupError):
    """No such confirmation for this worker."""


class ConfirmationDecided(ConfirmationError, ValueError):
    """The confirmation was already approved or rejected."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    confirmation_id: str
    tenant_id: str
    worker_id: str
    run_id: str
    task_id: str
    thread_id: str
    text: str
    skill_id: str | None
    gate_ref: str | None
    reasons: tuple[str, ...]
    created_at: str
    status: Status = "pending"
    decided_at: str | None = None
    decided_by: str | None = None
    reminders: int = 0
    last_reminded_at: str | None = None
    escalated_at: str | None = None
    # how the gated request arrived: the approved run is routed the same way, so the governance
    # stage reaches the same gate and accepts the approval for it
    source_type: str = "task"
    source_id: str | None = None
    duty_id: str | None = None
    trigger_id: str | None = None
    goal_id: str | None = None
    # "gate": the governance stage gated the task; "tool": a tool call inside a run waits — `tool_call`
    # is {"id", "name", "arguments"}, run under `posture` once approved; "interrupt": a LangGraph graph
    # asked a person (`tool_call` holds its value): approving or rejecting continues the graph
    kind: Literal["gate", "tool", "interrupt"] = "gate"
    tool_call: dict[str, Any] | None = None
    posture: str = "normal"
    approval_ref: str | None = None  # the gate approval the waiting run carried, if any
    evidence: dict[str, Any] | None = None  # the request's confidence / sources / actions (governance.evidence)
    # a ReAct run's conversation up to the waiting call: approval appends the call's result and continues
    checkpoint: list[dict[str, Any]] = field(default_factory=list)
    # a plan's or graph's run waits ({"engine", "run_id", ...}): the decision continues its state
    continuation: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION


_FIELDS: Final = frozenset(f.name for f in fields(Confirmation))


@dataclass(frozen=True, slots=True)
class ConfirmationPolicy:
    """What happens to an unanswered confirmation; Steward's `brief_window_hours` (reminder cadence),
    `waiting_default_timeout_hours` (the timeout) and `waiting_timeout_action`:

    - ``remind_then_escalate``: remind every `remind_every`; at the timeout escalate once (P0); then
      remind every `escalate_after`;
    - ``remind``: remind every `remind_every`, never escalate;
    - ``escalate``: nothing before the timeout; then as after an escalation above;
    - ``close``: remind every `remind_every`; at the timeout reject it (by ``policy:timeout``),
      cancel the waiting run and announce that it was closed.
    """

    remind_every: timedelta = timedelta(hours=4)
    escalate_after: timedelta = timedelta(hours=24)
    action: TimeoutAction = "remind_then_escalate"

    def __post_init__(self) -> None:
        if self.remind_every <= timedelta(0) or self.escalate_after <= timedelta(0):
            raise ValueError("remind_every and escalate_after must be positive")
        if self.action not in ("remind", "escalate", "remind_then_escalate", "close"):
            raise ValueError(f"unknown timeout action {self.action!r}")

    @classmethod
    def of(cls, brief_window_hours: float, waiting_default_timeout_hours: float, action: str) -> ConfirmationPolicy:
        """From the values of a worker's effective Steward policy."""
        return cls(
            timedelta(hours=brief_window_hours),
            timedelta(hours=waiting_default_timeout_hours),
            action,  # type: ignore[arg-type]  # validated in __post_init__
        )


class ConfirmationNotifier(Protocol):
    async def requested(self, confirmation: Confirmation) -> None: ...

    async def reminded(self, confirmation: Confirmation, *, escalated: bool) -> None: ...

    async def decided(self, confirmation: Confirmation) -> None: ...

    async def closed(self, confirmation: Confirmation) -> None: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ConfirmationStore:
    """Files under `tenants/{t}/workers/{w}/runtime/confirmations/`; also the governance ApprovalStore."""

    def __init__(
        self,
        workspace_root: Path,
        *,
        notifier: ConfirmationNotifier | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.root = workspace_root
        self.notifier = notifier  # set by the composition root once the inbox exists
        self.clock = clock
        self._lock = threading.Lock()

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "confirmations"

    def _path(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{validate_id(confirmation_id, 'confirmation id')}.json"

    def create(self, **values: object) -> Confirmation:
        confirmation = Confirmation(
            confirmation_id=f"cf_{uuid.uuid4().hex[:16]}",
            created_at=self.clock().isoformat(),
            **values,  # type: ignore[arg-type]
        )
        self._write(confirmation)
        return confirmation

    async def request(self, **values: object) -> Confirmation:
        """Create a confirmation and announce it (inbox item, event); the announcement is best effort:
        the stored confirmation is the truth and the reminder scan keeps asking."""
        confirmation = await asyncio.to_thread(lambda: self.create(**values))
        await self._notify("requested", confirmation)
        return confirmation

    def get(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Confirmation | None:
        path = self._path(tenant_id, worker_id, confirmation_id)
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") not in _READABLE:
            raise ConfirmationError(f"{path}: unsupported schema_version {data.get('schema_version')!r}")
        unknown = sorted(data.keys() - _FIELDS)
        if unknown:
            raise ConfirmationError(f"{path}: unknown fields {unknown}")
        data["reasons"] = tuple(data.get("reasons", ()))
        data["schema_version"] = SCHEMA_VERSION  # a version 1 file has every new field at its default
        return Confirmation(**data)

    def list(self, tenant_id: str, worker_id: str, status: Status | None = None) -> list[Confirmation]:
        folder = self._folder(tenant_id, worker_id)
        found = (
            [self.get(tenant_id, worker_id, p.stem) for p in sorted(folder.glob("cf_*.json"))]
            if folder.is_dir()
            else []
        )
        items = [c for c in found if c is not None and (status is None or c.status == status)]
        return sorted(items, key=lambda c: c.created_at, reverse=True)

    def decide(self, tenant_id: str, worker_id: str, confirmation_id: str, status: Status, by: str) -> Confirmation:
        """Record the decision once: ConfirmationNotFound (a LookupError) for an unknown id,
        ConfirmationDecided (a ValueError) when it was already decided — by anyone, in any process."""
        with self._locked(tenant_id, worker_id, confirmation_id):
            current = self.get(tenant_id, worker_id, confirmation_id)
            if current is None:
                raise ConfirmationNotFound(f"no confirmation {confirmation_id!r} for {tenant_id}/{worker_id}")
            if current.status != "pending":
                raise ConfirmationDecided(f"confirmation {confirmation_id!r} is already {current.status}")
            decided = replace(current, status=status, decided_at=self.clock().isoformat(), decided_by=by)
            self._write(decided)
            return decided

    async def decide_async(
        self, tenant_id: str, worker_id: str, confirmation_id: str, status: Status, by: str
    ) -> Confirmation:
        decided = await asyncio.to_thread(self.decide, tenant_id, worker_id, confirmation_id, status, by)
        await self._notify("decided", decided)
        return decided

    def record_reminder(
        self,
        confirmation: Confirmation,
        *,
        escalate: bool,
        still_due: Callable[[Confirmation], bool] = lambda c: True,
        at: datetime | None = None,
    ) -> Confirmation | None:
        """Count one reminder (and the escalation); None when it was decided meanwhile, or when
        `still_due` says another scan (another runtime) already reminded it."""
        with self._locked(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id):
            current = self.get(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id)
            if current is None or current.status != "pending" or not still_due(current):
                return None
            now = (at or self.clock()).isoformat()
            updated = replace(
                current,
                reminders=current.reminders + 1,
                last_reminded_at=now,
                escalated_at=now if escalate and current.escalated_at is None else current.escalated_at,
            )
            self._write(updated)
            return updated

    def get_approval(self, tenant_id: str, worker_id: str, ref: str) -> Approval | None:
        try:
            found = self.get(tenant_id, worker_id, ref)
        except (ConfirmationError, ValueError):
            return None
        if found is None:
            return None
        return Approval(ref, tenant_id, worker_id, found.status, policy_ref=found.gate_ref, decided_by=found.decided_by)

    async def _notify(self, what: Literal["requested", "decided"], confirmation: Confirmation) -> None:
        if self.notifier is None:
            return
        try:
            if what == "requested":
                await self.notifier.requested(confirmation)
            else:
                await self.notifier.decided(confirmation)
        except Exception:  # the confirmation is stored; reminders still find it
            log.exception("[Confirmations] %s notice for %s failed", what, confirmation.confirmation_id)

    def _locked(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Any:
        folder = self._folder(tenant_id, worker_id)
        return striped_lock(folder, validate_id(confirmation_id, "confirmation id"))

    def _write(self, confirmation: Confirmation) -> None:
        path = self._path(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id)
        with self._lock:
            write_atomic(path, json.dumps(asdict(confirmation), ensure_ascii=False, indent=2).encode("utf-8"))


def summary_line(confirmation: Confirmation) -> str:
    text = " ".join(confirmation.text.split())
    return text if len(text) <= 120 else text[:117] + "..."


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


async def cancel_waiting_run(router: WorkerRouter, confirmation: Confirmation) -> None:
    """`CloseRun` for the runtime: cancel the run the closed confirmation kept waiting."""
    from genworker.worker.lifecycle import TaskLifecycleError
    from genworker.worker.task import RunRef

    ref = RunRef(confirmation.tenant_id, confirmation.worker_id, confirmation.run_id)
    try:
        await router.tasks.cancel(ref, f"confirmation {confirmation.confirmation_id} closed after the timeout")
    except TaskLifecycleError as exc:
        log.warning("[Confirmations] run %s not cancelled: %s", confirmation.run_id, exc)


@dataclass(frozen=True, slots=True)
class Resolution:
    confirmation: Confirmation
    run: RunRecord | None = None  # the run the approval started
    output: str = ""


RunApproved = Callable[["RouteRequest"], Awaitable[tuple["RunRecord | None", str]]]
"""Runs the approved request to its end: (its run record, its output)."""


async def resolve(
    router: WorkerRouter,
    tenant_id: str,
    worker_id: str,
    confirmation_id: str,
    decision: Literal["approve", "reject"],
    by: str,
    *,
    run: RunApproved | None = None,
) -> Resolution:
    """Decide a confirmation and act on it: a rejection cancels the waiting run; an approval
    supersedes it and routes the task again with `approval_ref`, which the governance stage
    accepts for this gate only, so the new run does not wait again.

    Approving a tool confirmation first runs exactly the approved call (its id in
    `approved_call_ids`, under the waiting run's id and posture), then routes the task again with
    that call's result, so the continuation does not need to ask for it again. When the waiting run
    was a plan or a graph, the new run continues its state (`Continuation`); a graph interrupt is
    continued on rejection too, with the answer `{"approved": false, "by": ...}`."""
    from genworker.worker.lifecycle import TaskLifecycleError
    from genworker.worker.router import RouteRequest
    from genworker.worker.task import RunRef

    if decision not in ("approve", "reject"):
        raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")
    status: Status = "approved" if decision == "approve" else "rejected"
    decided = await router.confirmations.decide_async(tenant_id, worker_id, confirmation_id, status, by)
    if decided.continuation and (status == "approved" or decided.kind == "interrupt"):
        return await _continue_engine(router, decided, by, run)
    text: str = decided.text
    resume: tuple[dict[str, Any], ...] = ()
    if status == "approved" and decided.kind == "tool":
        call_id, result = await _run_approved_call(router, decided)
        if decided.checkpoint:  # continue the loop where it stopped: nothing before the call runs again
            resume = (*decided.checkpoint, {"role": "tool", "tool_call_id": call_id, "content": result})
        else:  # a workflow's interrupt: the task runs again with the call's result
            text = f"{decided.text}\n\n{_approved_call_text(decided, result)}"
    waiting = RunRef(tenant_id, worker_id, decided.run_id)
    try:
        if status == "rejected":
            await router.tasks.cancel(waiting, f"rejected by {by}")
        else:
            await router.tasks.supersede(waiting, f"approval {confirmation_id}")
    except TaskLifecycleError as exc:  # e.g. interrupted by a restart: the decision still stands
        log.warning("[Confirmations] run %s not closed after %s: %s", decided.run_id, status, exc)
    if status == "rejected":
        return Resolution(decided)
    req = RouteRequest(
        tenant_id,
        worker_id,
        text,
        decided.source_type,  # type: ignore[arg-type]  # stored from a SourceType
        decided.source_id,
        decided.thread_id or None,
        conversational=False,
        skill_id=decided.skill_id,
        duty_id=decided.duty_id,
        trigger_id=decided.trigger_id,
        goal_id=decided.goal_id,
        approval_ref=confirmation_id if decided.kind == "gate" else decided.approval_ref,
        evidence=evidence_from(decided.evidence or {}, f"confirmation {confirmation_id} evidence"),
        resume=resume,
    )
    record, output = await (run or partial(_run_to_end, router))(req)
    return Resolution(decided, record, output)


async def _continue_engine(
    router: WorkerRouter, decided: Confirmation, by: str, run: RunApproved | None
) -> Resolution:
    """The decision on a waiting plan or graph: a new run continues its state with the approved call's
    result, or with the interrupt's answer."""
    from genworker.engine.base import Continuation
    from genworker.worker.lifecycle import TaskLifecycleError
    from genworker.worker.router import RouteRequest
    from genworker.worker.task import RunRef

    approved: dict[str, str] = {}
    answer: dict[str, Any] | None = None
    if decided.kind == "interrupt":
        answer = {"approved": decided.status == "approved", "by": by}
    else:
        call_id, result = await _run_approved_call(router, decided)
        approved[call_id] = result
    waiting = RunRef(decided.tenant_id, decided.worker_id, decided.run_id)
    try:
        await router.tasks.supersede(waiting, f"{decided.status} {decided.confirmation_id}")
    except TaskLifecycleError as exc:
        log.warning("[Confirmations] run %s not closed after %s: %s", decided.run_id, decided.status, exc)
    source = decided.continuation or {}
    req = RouteRequest(
        decided.tenant_id,
        decided.worker_id,
        decided.text,
        decided.source_type,  # type: ignore[arg-type]  # stored from a SourceType
        decided.source_id,
        decided.thread_id or None,
        conversational=False,
        skill_id=decided.skill_id,
        duty_id=decided.duty_id,
        trigger_id=decided.trigger_id,
        goal_id=decided.goal_id,
        approval_ref=decided.approval_ref,
        evidence=evidence_from(decided.evidence or {}, f"confirmation {decided.confirmation_id} evidence"),
        continuation=Continuation(str(source.get("run_id") or decided.run_id), approved, answer),
    )
    record, output = await (run or partial(_run_to_end, router))(req)
    return Resolution(decided, record, output)


async def _run_approved_call(router: WorkerRouter, confirmation: Confirmation) -> tuple[str, str]:
    """Run the one approved tool call: its id and what it returned, as text."""
    from genworker.tools.base import ToolCall
    from genworker.tools.outcomes import outcome_text

    spec = confirmation.tool_call or {}
    call = ToolCall(str(spec.get("id")), str(spec.get("name")), dict(spec.get("arguments") or {}))
    worker = router.resolve(confirmation.tenant_id, confirmation.worker_id)
    state = router.registry.tenant(confirmation.tenant_id)
    assert state is not None
    scope = router.tools.scope(
        state.tenant,
        worker,
        confirmation.run_id,
        posture=confirmation.posture,  # type: ignore[arg-type]  # stored from a Posture
        approved_call_ids=frozenset({call.id}),
    )
    outcome = await router.tools.pipeline_for(worker).execute(scope, call, "system")
    return call.id, outcome_text(outcome)


def _approved_call_text(confirmation: Confirmation, result: str) -> str:
    spec = confirmation.tool_call or {}
    arguments = json.dumps(spec.get("arguments") or {}, ensure_ascii=False, default=str)
    return f"[approved tool call {spec.get('name')}({arguments}) was run by the runtime; result]\n{result}"


async def _run_to_end(router: WorkerRouter, req: RouteRequest) -> tuple[RunRecord | None, str]:
    from genworker.worker.router import RouteDone

    done = None
    async for event in router.route_stream(req):
        if isinstance(event, RouteDone):
            done = event
    return (done.record, done.result.output) if done is not None else (None, "")
