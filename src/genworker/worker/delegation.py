"""Delegation: the runner behind delegate_to_worker, spawn_task and spawn_subagents.

A child run goes through the WorkerRouter like any other work: source `collaboration`, the calling
worker as its source, its own governance, its parent in its provenance (`parent_run_id`,
`delegation_depth`) and itself in the parent's `children` (written when the child's record is
created, by TaskLifecycle). Before any child starts:

- the calling run's recorded governance must let it act (admitted `auto`, not a read-only posture),
  whatever the tool's scope says;
- the target is looked up in the calling run's tenant only: another tenant's worker cannot be named;
- `delegation_depth` stays within `max_depth`, and one run starts at most `max_children` children.

delegate_to_worker binds the child to the target's duty whose `collaboration` trigger accepts the
caller (`from_workers`, empty: anyone) and the `request_type`; a request_type no trigger accepts is
refused. A child bound to no duty runs like other autonomous work without a mandate: it may only read
and compute. spawn_task / spawn_subagents run on the calling worker and keep its duty, trigger and goal.

Each child is routed in a task of its own (the runtime's background set), so a parent that stops
waiting, or a tool call that times out, never cuts a child short; its idempotency key
`delegate:{parent_run}:{call}:{n}` makes a repeated call (released after an undo window, approved
after a confirmation) start nothing twice.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass

from genworker.ids import InvalidIdError, validate_id
from genworker.settings import Settings
from genworker.tools.builtin.delegation import ChildOutcome, ChildState, DelegationError, DelegationRequest
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.policy import READ_ONLY_POSTURES
from genworker.worker.lifecycle import RunNotFound
from genworker.worker.router import (
    RouteAccepted,
    RouteDone,
    RouteError,
    RouteRequest,
    RouterEvent,
    WorkerRouter,
    run_to_end,
)
from genworker.worker.task import RunRecord, RunRef, RunState
from genworker.workspace.models.duty import CollaborationTrigger, DutyStatus
from genworker.workspace.snapshot import Worker

__all__ = ["Delegation", "DelegationLimits", "collaboration_binding"]

log = logging.getLogger("genworker.worker.delegation")

_TRACKED_PARENTS = 10_000


MAX_DEPTH, MAX_CHILDREN, WAIT_S = 3, 5, 50.0


@dataclass(frozen=True, slots=True)
class DelegationLimits:
    max_depth: int = MAX_DEPTH  # a person's (or a duty's) run is depth 0; its children 1, theirs 2 ...
    max_children: int = MAX_CHILDREN  # children one run may start, over all its delegate calls
    wait_s: float = WAIT_S  # how long a call waits for answers (never longer than the tool's timeout)

    @classmethod
    def from_settings(cls, settings: Settings) -> DelegationLimits:
        return cls(
            int(settings.number("GENWORKER_DELEGATION_MAX_DEPTH", MAX_DEPTH, 1, 10)),
            int(settings.number("GENWORKER_DELEGATION_MAX_CHILDREN", MAX_CHILDREN, 1, 50)),
            settings.number("GENWORKER_DELEGATION_WAIT_S", WAIT_S, 1, 3600),
        )


@dataclass(frozen=True, slots=True)
class _Binding:
    duty_id: str | None = None
    trigger_id: str | None = None
    goal_id: str | None = None


def collaboration_binding(target: Worker, caller: str, request_type: str | None) -> _Binding | None:
    """The target's active duty and collaboration trigger that accept `caller`'s request: the
    trigger's `from_workers` lists the caller (or is empty), and its `request_type` is the one asked
    for; failing that, a trigger without a request_type (it takes any)."""
    exact: _Binding | None = None
    open_: _Binding | None = None
    for duty in sorted(target.duties.values(), key=lambda d: d.duty_id):
        if duty.status is not DutyStatus.ACTIVE:
            continue
        for trigger in duty.triggers:
            if not isinstance(trigger, CollaborationTrigger) or (
                trigger.from_workers and caller not in trigger.from_workers
            ):
                continue
            if trigger.request_type == request_type and exact is None:
                exact = _Binding(duty.duty_id, trigger.id)
            elif trigger.request_type is None and open_ is None:
                open_ = _Binding(duty.duty_id, trigger.id)
    return exact or open_


def _accepted_types(target: Worker, caller: str) -> list[str]:
    return sorted(
        {
            t.request_type
            for d in target.duties.values()
            for t in d.triggers
            if isinstance(t, CollaborationTrigger)
            and t.request_type
            and (not t.from_workers or caller in t.from_workers)
        }
    )


@dataclass
class _Child:
    accepted: RouteAccepted
    done: asyncio.Future[RouteDone | None]


class Delegation:
    def __init__(
        self, router: WorkerRouter, background: set[asyncio.Task[None]], limits: DelegationLimits | None = None
    ) -> None:
        self.router = router
        self.background = background
        self.limits = limits or DelegationLimits()
        self._started: OrderedDict[str, int] = OrderedDict()  # parent run -> children started in this process
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def delegate(self, ctx: ToolContext, request: DelegationRequest) -> list[ChildOutcome]:
        scope = ctx.scope
        parent_ref = RunRef(scope.tenant_id, scope.worker_id, scope.run_id)
        try:
            parent = await self.router.tasks.get_run(parent_ref)
        except RunNotFound:
            raise DelegationError("only a recorded run can delegate, and this call belongs to none") from None
        _check_governance(parent)
        target, binding = self._target(scope.tenant_id, scope.worker_id, parent, request)
        depth = parent.provenance.delegation_depth + 1
        if depth > self.limits.max_depth:
            raise DelegationError(
                f"this run is at delegation depth {depth - 1}; work may be delegated at most {self.limits.max_depth} "
                "levels deep: do the task yourself"
            )
        lock = self._locks.setdefault(parent.run_id, asyncio.Lock())
        async with lock:
            used = max(self._started.get(parent.run_id, 0), len(parent.children))
            if used + len(request.tasks) > self.limits.max_children:
                left = max(0, self.limits.max_children - used)
                raise DelegationError(
                    f"one run may start at most {self.limits.max_children} child runs; this one has started {used}, "
                    f"so {left} more (asked for {len(request.tasks)})"
                )
            children: list[_Child] = []
            try:
                for n, text in enumerate(request.tasks):
                    child_req = RouteRequest(
                        scope.tenant_id, target.worker_id, text, "collaboration", scope.worker_id,
                        conversational=False, duty_id=binding.duty_id, trigger_id=binding.trigger_id,
                        goal_id=binding.goal_id, idempotency_key=f"delegate:{parent.run_id}:{ctx.call.id}:{n}",
                        parent=parent_ref, delegation_depth=depth,
                    )  # fmt: skip
                    children.append(await self._start(child_req))
            finally:
                self._count(parent.run_id, used + len(children))
        if request.wait:
            wait_s = min(self.limits.wait_s, max(1.0, ctx.timeout_s - 5.0))
            await asyncio.wait([c.done for c in children], timeout=wait_s)
        return [_outcome(target.worker_id, c) for c in children]

    def _target(
        self, tenant_id: str, caller: str, parent: RunRecord, request: DelegationRequest
    ) -> tuple[Worker, _Binding]:
        if request.worker_id is None:  # spawn_*: the caller itself, under the parent's duty and goal
            worker = self.router.registry.worker(tenant_id, caller)
            if worker is None:
                raise DelegationError(f"worker {caller!r} is not loaded")
            p = parent.provenance
            return worker, _Binding(p.duty_id, p.trigger_id, p.goal_id)
        try:
            validate_id(request.worker_id, "worker_id")
        except InvalidIdError:
            raise DelegationError(f"worker_id {request.worker_id!r} is not a worker id: name a colleague") from None
        target = self.router.registry.worker(tenant_id, request.worker_id)  # never another tenant's
        if target is None or target.worker_id == caller:
            raise DelegationError(
                f"{request.worker_id!r} is not one of your colleagues"
                + (" (use spawn_task for your own work)" if request.worker_id == caller else "")
                + f"; they are: {', '.join(self._colleagues(tenant_id, caller)) or 'none'}"
            )
        binding = collaboration_binding(target, caller, request.request_type)
        if binding is None and request.request_type is not None:
            accepted = _accepted_types(target, caller)
            raise DelegationError(
                f"{target.worker_id} accepts no request_type {request.request_type!r} from you; "
                f"it accepts: {', '.join(accepted) or 'none (leave request_type out)'}"
            )
        return target, binding or _Binding()

    def _colleagues(self, tenant_id: str, caller: str) -> list[str]:
        state = self.router.registry.tenant(tenant_id)
        return sorted(w for w in (state.workers if state is not None else {}) if w != caller)

    def _count(self, run_id: str, started: int) -> None:
        self._started[run_id] = started
        self._started.move_to_end(run_id)
        while len(self._started) > _TRACKED_PARENTS:
            self._started.popitem(last=False)

    async def _start(self, req: RouteRequest) -> _Child:
        """The child routed in a background task; back once its run is on record (and so among the
        parent's children): the first event after its acceptance comes after that."""
        stream = self.router.route_stream(req)
        try:
            first = await anext(stream)
        except RouteError as exc:
            raise DelegationError(f"{req.worker_id} cannot take it: {exc}") from None
        assert isinstance(first, RouteAccepted)
        done: asyncio.Future[RouteDone | None] = asyncio.get_running_loop().create_future()
        recorded = asyncio.Event()
        task = asyncio.create_task(_finish(stream, done, recorded, first.run_id), name=f"child:{first.run_id}")
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        await recorded.wait()
        return _Child(first, done)


async def _finish(
    stream: AsyncIterator[RouterEvent], done: asyncio.Future[RouteDone | None], recorded: asyncio.Event, run_id: str
) -> None:
    result: RouteDone | None = None
    try:
        result = await run_to_end(stream, on_event=lambda _: recorded.set())
    except Exception:  # the router has recorded what it could (Settler.internal_error)
        log.exception("child run %s failed", run_id)
    finally:
        recorded.set()
        if not done.done():
            done.set_result(result)


def _check_governance(parent: RunRecord) -> None:
    """The delegate effect against the run's governance as recorded when it was admitted."""
    verdict = parent.provenance.governance_decision
    if verdict is None or verdict.action != "auto" or verdict.posture in READ_ONLY_POSTURES:
        posture = verdict.posture if verdict is not None else "none recorded"
        raise DelegationError(
            f"this run was admitted with posture {posture!r}, which does not let it start other work; "
            "propose it instead"
        )


def _outcome(worker_id: str, child: _Child) -> ChildOutcome:
    run_id = child.accepted.run_id
    if not child.done.done():
        return ChildOutcome(worker_id, run_id, "running")
    done = child.done.result()
    if done is None:
        return ChildOutcome(worker_id, run_id, "failed", error="the child run ended with an internal error")
    result, record = done.result, done.record
    if result.error_code == "duplicate":
        return ChildOutcome(worker_id, record.run_id, "duplicate", error=f"its run is {record.state.value}")
    state: ChildState
    match record.state:
        case RunState.COMPLETED:
            state = "completed"
        case RunState.WAITING_APPROVAL:
            state = "approval_required"
        case RunState.PAUSED:
            state = "waiting"
        case _:
            state = "failed"
    error = record.error.message if record.error is not None else result.error
    return ChildOutcome(worker_id, run_id, state, result.output, error)
