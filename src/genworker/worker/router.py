"""WorkerRouter: every entry's one path to an engine (seed §3.3 steps 1-12, in order).

accept (tenant, worker, a service's hand-over or refusal, skill, thread id) -> RouteAccepted ->
the thread's turn (FIFO) -> admission (governance, skill, the task recorded: admission.py) ->
preparation (session, tool scope, pre_script, recall, context: preparation.py) -> the engine, its
events passed on as they come -> settlement (duty contract, run record, turn, episode:
settlement.py) -> RouteDone.

`run(route, emit)` pushes an accepted run's events to `emit` (the API's run handle queues them for
the SSE encoder); `route_stream(req)` gives the same events as an async iterator, and `run_to_end`
(routing.py) reads such a stream to its RouteDone.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, assert_never

from genworker.conversation import SessionManager, ThreadQueue
from genworker.conversation.models import session_id_for
from genworker.engine.base import EngineDeps, EngineRequest, Interrupted, RunResult, ToolRunner
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import Emit, EngineEvent, RunError, RunFinished, TextDelta, ToolCallResult
from genworker.ids import validate_id
from genworker.llm.bookkeeping import turn_in_progress
from genworker.llm.client import LLMClient
from genworker.memory import MemoryService
from genworker.tools.environment import ToolRuntime
from genworker.worker.admission import Admitted, Admitter, Blocked, Duplicate, Gated
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.context import ContextWindowConfig, compact_for_overflow
from genworker.worker.context.models import ManagedContext
from genworker.worker.duty_steps import DutyOutcomeSteps
from genworker.worker.engine_runs import CheckpointStores, RunEngineState, checkpoint_stores
from genworker.worker.governance import TaskGovernanceStage
from genworker.worker.governance.evidence import PlannedEffect
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.preparation import Prepared, Preparer
from genworker.worker.routing import (
    RouteAccepted,
    RouteDone,
    RouteEmit,
    RouteError,
    RouteEvents,
    RouteRequest,
    RouterEvent,
    run_to_end,
)
from genworker.worker.run_trace import RunTracer, RunTraces, context_report, traced
from genworker.worker.settlement import EngineRun, Settler
from genworker.worker.skill_matcher import SkillMatcher
from genworker.worker.task import RunRef, ToolCallRecord
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker
from genworker.write_journal import DIRECT, DurableFiles

if TYPE_CHECKING:
    from genworker.worker.service import ServiceDesk

__all__ = [
    "Route",
    "RouteAccepted",
    "RouteDone",
    "RouteError",
    "RouteRequest",
    "RouterEvent",
    "WorkerRouter",
    "run_to_end",
]


@dataclass(frozen=True, slots=True)
class Route:
    """An accepted request: as it is routed (a thread handed over to another worker goes to that
    worker), its worker, and the ids its caller was given."""

    req: RouteRequest
    worker: Worker
    accepted: RouteAccepted


class RunSupervision(Protocol):
    """The supervisor (genworker.supervision): a watcher for an accepted run, None when no policy is attached."""

    async def watch(self, req: RouteRequest, ids: RouteAccepted) -> RunWatch | None: ...


class RunWatch(Protocol):
    def tools(self, inner: ToolRunner) -> ToolRunner: ...

    def observe(self, downstream: Emit) -> Emit: ...

    async def guard(self) -> Interrupted | None: ...


class PlanRegistry(Protocol):
    """Where an admitted run's planned effects are registered (the Conflict Arbiter's plan time)."""

    async def register(
        self, tenant_id: str, worker_id: str, run_id: str, planned: tuple[PlannedEffect, ...]
    ) -> None: ...


@dataclass
class WorkerRouter:
    registry: WorkspaceRegistry
    llm: LLMClient
    tools: ToolRuntime
    sessions: SessionManager
    queue: ThreadQueue
    tasks: TaskLifecycle
    governance: TaskGovernanceStage
    confirmations: ConfirmationStore
    matcher: SkillMatcher
    context_config: ContextWindowConfig | None = None
    memory: MemoryService | None = None  # recall before the context, an episode after a completed run
    files: DurableFiles = DIRECT  # the stores' own, so a turn's writes can share one durable wait
    duty_outcomes: DutyOutcomeSteps | None = None  # a duty run's contract, deliveries, escalations
    checkpoints: CheckpointStores | None = None  # LangGraph checkpoints (default: the workers' files)
    service: ServiceDesk | None = None  # service mode: admission, session TTL, knowledge, hand-offs
    supervision: RunSupervision | None = None  # policies watching runs (docs/supervisor.md)
    plans: PlanRegistry | None = None  # planned effects (evidence.planned_effects) -> the Conflict Arbiter
    traces: RunTraces | None = None  # each run's context and AG-UI timeline, for the run view

    def resolve(self, tenant_id: str, worker_id: str) -> Worker:
        worker = self.registry.worker(tenant_id, worker_id)
        if worker is None:
            raise RouteError("worker_not_found", f"no worker {worker_id!r}")
        return worker

    async def accept(self, req: RouteRequest) -> Route:
        """`req` accepted with new run and task ids; RouteError when it cannot be routed (nothing
        is recorded then)."""
        worker = self.resolve(req.tenant_id, req.worker_id)
        if req.parent is not None and req.parent.tenant_id != req.tenant_id:
            raise RouteError("cross_tenant", "work is only ever delegated within its own tenant")
        if self.service is not None:  # a busy service refuses a new conversation; a handed-over one moves
            req, worker = await self.service.admit(req, worker)
        if req.skill_id is not None and req.skill_id not in worker.skills:
            raise RouteError("skill_not_found", f"worker {req.worker_id!r} has no skill {req.skill_id!r}")
        accepted = RouteAccepted(self._thread_id(req), f"run_{uuid.uuid4().hex}", f"task_{uuid.uuid4().hex}")
        return Route(req, worker, accepted)

    async def route_stream(self, req: RouteRequest) -> AsyncIterator[RouterEvent]:
        """The run's events: RouteAccepted first (RouteError instead when `req` cannot be routed),
        RouteDone last. A reader that leaves before RouteDone stops the run."""
        route = await self.accept(req)
        yield route.accepted
        events = RouteEvents()
        task = asyncio.create_task(self._run_into(route, events), name=f"route:{route.accepted.run_id}")
        done = False
        try:
            async for event in events:
                done = isinstance(event, RouteDone)
                yield event
            await task  # the router's own error, when the run could not even be recorded as failed
        finally:
            if not task.done():
                if not done:
                    task.cancel()
                await asyncio.wait([task])  # a run that ended leaves its turn first
            if not task.cancelled():
                task.exception()  # read: logged by the settlement when it could not be recorded

    async def _run_into(self, route: Route, events: RouteEvents) -> None:
        try:
            await self.run(route, events.put)
        finally:
            events.close()

    async def run(self, route: Route, emit: RouteEmit) -> None:
        """Route an accepted request to its end, its events to `emit` as they happen, RouteDone last.
        Raises only when the run failed and could not be recorded as failed."""
        req, worker, ids = route.req, route.worker, route.accepted
        settler = self._settler()
        tracer = self.traces.start(req.tenant_id, req.worker_id, ids.run_id, ids.thread_id) if self.traces else None
        emit = traced(emit, tracer)
        try:
            with turn_in_progress():  # LiteLLM's logging waits until no turn is in progress (llm/bookkeeping.py)
                async with self.queue.turn(req.tenant_id, ids.thread_id, ids.run_id):
                    try:
                        await self._turn(route, settler, emit, tracer)
                    except Exception as exc:  # still in the turn: the next message sees the run ended
                        for event in await settler.internal_error(req, worker, ids.run_id, exc):
                            await emit(await settler.ended(worker, event))
        finally:
            if tracer is not None:  # a run that ended without RouteDone keeps its trace too
                await tracer.close()

    async def _turn(self, route: Route, settler: Settler, emit: RouteEmit, tracer: RunTracer | None) -> None:
        req, worker, ids = route.req, route.worker, route.accepted
        relay = await self.service.relay(req, worker, ids.run_id, ids.task_id) if self.service else None
        if relay is not None:  # the thread is with a person: the message goes to them
            async for event in relay:
                await emit(event)
            return
        preparer = self._preparer()
        # A new thread's session, the policy snapshot and the run record: durable together before
        # the engine or a pre_script starts; recall and context assembly overlap their sync.
        async with self.files.pending() as written:
            session = await preparer.session(req, ids.thread_id)
            admission = await Admitter(self.registry, self.governance, self.matcher, self.tasks).admit(req, worker, ids)
        if not isinstance(admission, Admitted):
            await written.durable()
        ref = RunRef(req.tenant_id, req.worker_id, ids.run_id)
        match admission:
            case Admitted():
                if self.plans is not None and req.evidence.planned:
                    await self.plans.register(req.tenant_id, req.worker_id, ids.run_id, req.evidence.planned)
                prepared = await preparer.prepare(req, worker, admission, session, written)
                if isinstance(prepared, Blocked):  # its pre_script failed
                    last = await settler.refuse(worker, ref, prepared)
                else:
                    watch = await self.supervision.watch(req, ids) if self.supervision is not None else None
                    ran = await self._engine(prepared, ref, emit, watch, tracer)
                    last = await settler.settle(req, worker, admission, prepared, session, ran, written)
            case Blocked():
                last = await settler.refuse(worker, ref, admission)
            case Gated():
                last = await settler.gate(req, ref, admission)
            case Duplicate():
                last = settler.duplicate(admission)
            case _:
                assert_never(admission)
        for event in last:
            await emit(await settler.ended(worker, event))

    async def _engine(
        self, prepared: Prepared, ref: RunRef, emit: RouteEmit, watch: RunWatch | None, tracer: RunTracer | None
    ) -> EngineRun:
        """Run the engine, its events to `emit` as they come; one reactive retry on a provider
        context overflow. The engine starts at once: its tool calls wait for the run record."""
        events = _EngineEvents(emit, prepared.question, self.service, ref.run_id)
        context = prepared.context
        for attempt in (1, 2):
            if tracer is not None:  # the context this attempt runs with
                tracer.context(context_report(context), prepared.scope.secrets)
            events.hold_overflow, events.held = attempt == 1, []
            sink = watch.observe(events.emit) if watch is not None else events.emit
            result = await self._dispatcher(ref, watch).run(_with_context(prepared.engine, context), sink)
            if result.error_code == "context_overflow" and attempt == 1:
                smaller = compact_for_overflow(context)
                if smaller.total_tokens < context.total_tokens:
                    context = smaller
                    continue
                for event in events.held:
                    await events.forward(event)
            events.ran.result = _asking(result, events.question)
            break
        return events.ran

    def _dispatcher(self, ref: RunRef, watch: RunWatch | None = None) -> EngineDispatcher:
        stores = self.checkpoints or checkpoint_stores(self.registry.root)
        tools: ToolRunner = self.tools.pipeline_for(self.resolve(ref.tenant_id, ref.worker_id))
        return EngineDispatcher(
            EngineDeps(
                self.llm,
                watch.tools(tools) if watch is not None else tools,
                RunEngineState(self.tasks, ref.tenant_id, ref.worker_id, stores),
                self.registry.root,
                guard=watch.guard if watch is not None else None,
            )
        )

    def _preparer(self) -> Preparer:
        return Preparer(
            self.registry, self.llm, self.tools, self.sessions, self.context_config, self.memory, self.service
        )

    def _settler(self) -> Settler:
        return Settler(self.tasks, self.sessions, self.confirmations, self.memory, self.files, self.duty_outcomes)

    def _thread_id(self, req: RouteRequest) -> str:
        """The caller's thread (checked as its session id will be), or a new one."""
        if req.conversational:
            thread_id = req.thread_id or self.sessions.new_thread_id()
        else:
            thread_id = req.thread_id or f"task{uuid.uuid4().hex[:12]}"
        try:
            validate_id(req.tenant_id, "tenant id")
            validate_id(thread_id, "thread id")
            if req.conversational:
                session_id_for("thread", req.worker_id, thread_id)
        except ValueError as exc:
            raise RouteError("invalid_thread_id", str(exc)) from None
        return thread_id


class _EngineEvents:
    """The engine's events on their way to the caller. A first attempt's context_overflow error is
    held back (the reactive retry may still succeed); tool calls and RUN_FINISHED are kept in `ran`
    (RUN_FINISHED goes out once the run's files are written); a cross-channel question, and the
    notice of a hand-off made in this run, end a completed answer."""

    def __init__(self, emit: RouteEmit, question: str | None, service: ServiceDesk | None, run_id: str) -> None:
        self._emit, self.question, self._service, self._run_id = emit, question, service, run_id
        self.ran = EngineRun()
        self.hold_overflow = False
        self.held: list[EngineEvent] = []

    async def emit(self, event: EngineEvent) -> None:
        if self.hold_overflow and isinstance(event, RunError) and event.code == "context_overflow":
            self.held.append(event)
            return
        await self.forward(event)

    async def forward(self, event: EngineEvent) -> None:
        if isinstance(event, RunFinished):
            if self._service is not None:  # a hand-off made in this run: the user is told who took over
                notice = self._service.take_notice(self._run_id)
                self.question = "\n\n".join(p for p in (self.question, notice) if p) or None
            if self.question and event.outcome == "completed":
                await self._emit(TextDelta(f"\n\n{self.question}"))
                event = replace(event, output=f"{event.output}\n\n{self.question}")
            self.ran.finished = event
            return
        if isinstance(event, ToolCallResult):
            kind = "needs_approval" if event.outcome == "approval_required" else event.outcome
            self.ran.tool_calls.append(ToolCallRecord(event.name, event.call_id, kind))
        await self._emit(event)


def _with_context(req: EngineRequest, context: ManagedContext) -> EngineRequest:
    """`req` with the assembled prompt: system text (then `req.system`, the duty brief), history and
    task from `context`."""
    system = "\n\n".join(p for p in (context.system_prompt, req.system) if p)
    return EngineRequest(
        req.run_id, req.skill, context.task, req.scope, system, tuple(context.history), req.purpose, req.resume,
        req.budget, req.continuation,
    )  # fmt: skip


def _asking(result: RunResult, question: str | None) -> RunResult:
    """The run's answer with the cross-channel question after it (what the session and channels keep)."""
    if question is None or result.status != "completed":
        return result
    return replace(result, output=f"{result.output}\n\n{question}")
