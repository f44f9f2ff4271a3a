"""WorkerRouter: every entry's one path to an engine (seed §3.3 steps 1-12, in order).

resolve tenant/worker/thread -> per-thread turn (FIFO) -> TaskGovernanceStage (manifest,
snapshots, decision) -> persist the task -> blocked: fail | gated: confirmation | auto:
SkillMatcher -> tool scope by posture -> context under budget -> engine (with the execution
depth's budget and, for a duty, its brief) -> results back to the run record and the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from genworker.conversation import AssistantMessage, SessionManager, ThreadQueue, UserMessage, to_model_messages
from genworker.conversation.models import ConversationSession, session_id_for
from genworker.engine.base import Continuation, EngineDeps, EngineRequest, RunResult, RunStatus
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import ApprovalRequired, EngineEvent, RunError, RunFinished, TextDelta, ToolCallResult
from genworker.ids import validate_id
from genworker.llm.bookkeeping import turn_in_progress
from genworker.llm.client import LLMClient
from genworker.memory import Episode, MemoryBinding, MemoryService, RecallResult, RunOutcome, channel_of
from genworker.memory.crosschannel import looks_like_continuation, offer_answer
from genworker.memory.models import MemoryItem
from genworker.observability.logging import internal_error_message, log_decision, log_internal_error
from genworker.observability.metrics import record_gate_result
from genworker.tools.base import ToolCall
from genworker.tools.environment import ToolRuntime
from genworker.tools.pre_script import PreScriptError, run_pre_script
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.context import ContextWindowConfig, build_managed_context, compact_for_overflow
from genworker.worker.context.models import ManagedContext
from genworker.worker.duty_brief import depth_budget, duty_brief
from genworker.worker.duty_steps import DutyOutcomeSteps
from genworker.worker.engine_runs import CheckpointStores, RunEngineState, checkpoint_stores
from genworker.worker.governance import GovernanceDecision, GovernanceInput, GovernanceOutcome, TaskGovernanceStage
from genworker.worker.governance.evidence import NO_EVIDENCE, Evidence
from genworker.worker.governance.models import SourceType
from genworker.worker.lifecycle import IllegalTransition, TaskLifecycle
from genworker.worker.skill_matcher import SkillMatch, SkillMatcher, UnknownSkillError
from genworker.worker.task import (
    GovernanceVerdict,
    RunRecord,
    RunRef,
    TaskManifest,
    TaskProvenance,
    ToolCallRecord,
)
from genworker.workspace.models.depth import DEFAULT_DEPTH
from genworker.workspace.models.duty import PreScript
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker
from genworker.write_journal import DIRECT, DurableFiles, Written

if TYPE_CHECKING:
    from genworker.worker.service import ServiceDesk

log = logging.getLogger("genworker.router")

__all__ = ["RouteAccepted", "RouteDone", "RouteError", "RouteRequest", "RouterEvent", "WorkerRouter"]

Message = Mapping[str, Any]


class RouteError(Exception):
    """The request cannot be routed (4xx): unknown worker, unknown skill, bad thread id."""

    def __init__(self, code: str, message: str, status: int = 404, headers: Mapping[str, str] | None = None) -> None:
        self.code, self.status = code, status
        self.headers = dict(headers or {})  # e.g. Retry-After of a busy service
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class RouteRequest:
    tenant_id: str  # always from the credential, never from the body
    worker_id: str
    text: str
    source_type: SourceType = "chat"
    source_id: str | None = None
    thread_id: str | None = None
    conversational: bool = True  # keep history in the thread session
    skill_id: str | None = None
    preferred_skill_ids: tuple[str, ...] = ()  # ranked ahead of others when the text matches no better
    duty_id: str | None = None
    trigger_id: str | None = None
    goal_id: str | None = None
    approval_ref: str | None = None
    history: tuple[Message, ...] = ()  # stateless callers (OpenAI-compatible) send their own
    idempotency_key: str | None = None  # a second request with the same key gets the first run back
    scheduled_for: datetime | None = None
    evidence: Evidence = NO_EVIDENCE  # an inferred action's confidence, sources, actions (the Policy Gate's)
    resume: tuple[Message, ...] = ()  # an approved tool call's checkpoint: the engine continues it
    continuation: Continuation | None = None  # a plan or graph of an earlier run: the engine continues it
    parent: RunRef | None = None  # delegated: the run that asked for it (its tenant must be this one)
    delegation_depth: int = 0  # the parent's depth + 1


@dataclass(frozen=True, slots=True)
class RouteAccepted:
    thread_id: str
    run_id: str
    task_id: str


@dataclass(frozen=True, slots=True)
class RouteDone:
    result: RunResult
    record: RunRecord


RouterEvent = RouteAccepted | EngineEvent | RouteDone


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

    def resolve(self, tenant_id: str, worker_id: str) -> Worker:
        worker = self.registry.worker(tenant_id, worker_id)
        if worker is None:
            raise RouteError("worker_not_found", f"no worker {worker_id!r}")
        return worker

    async def route_stream(self, req: RouteRequest) -> AsyncIterator[RouterEvent]:
        worker = self.resolve(req.tenant_id, req.worker_id)
        if req.parent is not None and req.parent.tenant_id != req.tenant_id:
            raise RouteError("cross_tenant", "work is only ever delegated within its own tenant", 403)
        if self.service is not None:  # a busy service refuses a new conversation; a handed-over one moves
            req, worker = await self.service.admit(req, worker)
        if req.skill_id is not None and req.skill_id not in worker.skills:  # 404, like an unknown worker
            raise RouteError("skill_not_found", f"worker {req.worker_id!r} has no skill {req.skill_id!r}")
        thread_id = self._thread_id(req)
        run_id, task_id = f"run_{uuid.uuid4().hex}", f"task_{uuid.uuid4().hex}"
        yield RouteAccepted(thread_id, run_id, task_id)
        with turn_in_progress():  # LiteLLM's logging waits until no turn is in progress (llm/bookkeeping.py)
            async with self.queue.turn(req.tenant_id, thread_id, run_id):
                try:
                    relay = await self.service.relay(req, worker, run_id, task_id) if self.service else None
                    if relay is not None:  # the thread is with a person: the message goes to them
                        async for event in relay:
                            yield event
                        return
                    # A new thread's session, the policy snapshot and the run record: durable together
                    # before the engine or a pre_script starts; recall and context assembly overlap their sync.
                    async with self.files.pending() as written:
                        # Read inside the turn: a message queued behind a busy thread sees the turn before it.
                        session = await self._session(req, thread_id)
                        start = await self._start(req, worker, thread_id, run_id, task_id)
                    async for event in self._run(req, worker, session, thread_id, start, written):
                        yield await self._ended(worker, event)
                except Exception as exc:  # still in the turn: the next message sees the run ended
                    async for event in self._internal_error(req, run_id, exc):
                        yield await self._ended(worker, event)

    async def _ended(self, worker: Worker, event: RouterEvent) -> RouterEvent:
        """A duty run's RouteDone, after its result was delivered and its escalations made. Never
        raises: the run is recorded whatever happens to its way out (which its record shows)."""
        if self.duty_outcomes is None or not isinstance(event, RouteDone) or event.result.error_code == "duplicate":
            return event
        duty = worker.duties.get(event.record.provenance.duty_id or "")
        if duty is None:
            return event
        try:
            return RouteDone(event.result, await self.duty_outcomes.ended(worker, duty, event.record))
        except Exception:
            log.exception("[Router] run %s: its delivery or escalation failed", event.record.run_id)
            return event

    async def _internal_error(self, req: RouteRequest, run_id: str, exc: Exception) -> AsyncIterator[RouterEvent]:
        """A bug or a storage failure once the run was accepted: logged under an error id, the run
        recorded as failed (unless it had already ended), then RunError and RouteDone, so a stream
        ends well-formed and says no more than the id. When the run cannot be recorded (no record,
        or the disk refuses), the original error goes on."""
        message = internal_error_message(log_internal_error(log, f"[Router] run {run_id} failed", exc))
        ref = RunRef(req.tenant_id, req.worker_id, run_id)
        try:
            record = await self.tasks.fail(ref, "internal_error", message)
        except IllegalTransition:  # it had ended (say completed, then its turn could not be stored)
            record = await self.tasks.get_run(ref)
        except Exception:
            log.exception("[Router] run %s: its internal error could not be recorded", run_id)
            raise exc from None
        yield RunError(run_id, "internal_error", message)
        yield RouteDone(RunResult("failed", error_code="internal_error", error=message), record)

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
            raise RouteError("invalid_thread_id", str(exc), 422) from None
        return thread_id

    async def _session(self, req: RouteRequest, thread_id: str) -> ConversationSession | None:
        if not req.conversational:
            return None
        ttl = self.service.session_ttl(req) if self.service is not None else None  # idle service threads expire
        if req.thread_id is None:  # a thread this turn starts: stored with its first turn (_append_turn)
            return self.sessions.unsaved_thread(req.tenant_id, req.worker_id, thread_id, ttl_s=ttl)
        session = await self.sessions.get_or_create_thread(req.tenant_id, req.worker_id, thread_id, ttl_s=ttl)
        return session if ttl is None or session.ttl_s == ttl else await self.sessions.set_ttl(session, ttl)

    async def _start(self, req: RouteRequest, worker: Worker, thread_id: str, run_id: str, task_id: str) -> _Started:
        """Governance, the skill, and the task's manifest and run record written (not yet durable)."""
        state = self.registry.tenant(req.tenant_id)
        assert state is not None
        outcome = await self.governance.evaluate_async(
            GovernanceInput(
                state.tenant,
                worker,
                req.text,
                req.source_type,
                req.source_id,
                req.duty_id,
                req.trigger_id,
                req.goal_id,
                req.skill_id,
                preferred_skill_ids=req.preferred_skill_ids,
                approval_ref=req.approval_ref,
                requested_actions=req.evidence.actions,
                requested_effects=req.evidence.effects,
                confidence=req.evidence.confidence,
                evidence_sources=req.evidence.sources,
                undo_available=True,  # tools/environment.py holds the external calls of a run given undo_window_s
            )
        )
        decision = outcome.decision
        # matched before the run is recorded, so the record names the skill that runs
        match = self._match_skill(worker, req, outcome) if decision.action == "auto" else None
        skill_id = match.skill_id if isinstance(match, SkillMatch) else req.skill_id
        manifest = self._manifest(req, outcome, thread_id, run_id, task_id, skill_id)
        _record_decision(decision, req, run_id)
        persisted = await self.tasks.persist_initial(manifest, start=decision.action != "blocked")
        return _Started(outcome, match, manifest, persisted)

    async def _run(
        self,
        req: RouteRequest,
        worker: Worker,
        session: ConversationSession | None,
        thread_id: str,
        start: _Started,
        written: Written,
    ) -> AsyncIterator[RouterEvent]:
        """The started task. `written` (its snapshot, manifest and run record) is waited for at once
        when the task will not run, before a pre_script, and otherwise before the engine's first
        tool call (`ToolScope.recorded`): the engine's first model call overlaps that sync."""
        outcome, match, manifest, persisted = start.outcome, start.match, start.manifest, start.persisted
        decision, run_id = outcome.decision, manifest.run_id
        ref = RunRef(req.tenant_id, req.worker_id, run_id)
        if decision.action != "auto" or isinstance(match, str) or persisted.run_id != run_id:
            await written.durable()
        if persisted.run_id != run_id:  # the idempotency key already made a run: never run it twice
            status: RunStatus = "completed" if persisted.state == "completed" else "failed"
            replay = RunResult(status, error_code="duplicate", error=f"already run as {persisted.run_id}")
            yield RouteDone(replay, persisted)
            return
        if decision.action == "blocked":
            message = (
                "; ".join(r.message for r in decision.reasons if r.code not in ("default",)) or "blocked by policy"
            )
            record = await self.tasks.fail(ref, "governance_blocked", message)
            yield RunError(run_id, "governance_blocked", message)
            yield RouteDone(RunResult("failed", error_code="governance_blocked", error=message), record)
            return
        if decision.action == "gated":
            async for event in self._gate(req, manifest, outcome, ref):
                yield event
            return
        assert match is not None  # the decision is auto
        if isinstance(match, str):
            message = match
            record = await self.tasks.fail(ref, "no_skill", message)
            yield RunError(run_id, "no_skill", message)
            yield RouteDone(RunResult("failed", error_code="no_skill", error=message), record)
            return
        tenant = self.registry.tenant(req.tenant_id)
        assert tenant is not None
        scope = self.tools.scope(
            tenant.tenant,
            worker,
            run_id,
            posture=decision.posture,
            undo_window_s=decision.undo_window_s,
            skill_id=match.skill_id,  # wait_for_event records it, so the continuation keeps it
            conversational=session is not None,  # and whether the thread's history carries the request
            recorded=written.durable,  # no tool acts before the run record is on disk
        )
        task_text = req.text
        pre_script = _pre_script(worker, outcome, manifest.provenance.goal_id)
        if pre_script is not None:  # run once, before the engine; its output joins the task text
            await written.durable()
            try:
                stdout = await run_pre_script(pre_script, scope, self.tools.pipeline_for(worker))
            except PreScriptError as exc:
                record = await self.tasks.fail(ref, "pre_script_failed", str(exc))
                yield RunError(run_id, "pre_script_failed", str(exc))
                yield RouteDone(RunResult("failed", error_code="pre_script_failed", error=str(exc)), record)
                return
            task_text = f"{req.text}\n\n[pre_script output]\n{stdout.strip()}"
        history = to_model_messages(self.sessions.history(session)) if session is not None else req.history
        thread = thread_id if session is not None else None
        binding = MemoryBinding(req.tenant_id, req.worker_id, run_id, manifest.provenance.duty_id, thread)
        question = await self._cross_channel(binding, req, session)  # before recall: an accepted summary counts
        recalled = await self._recall(binding, req.text, manifest.provenance.goal_id, session)
        knowledge, guidance = await self._service_context(worker, req.text)
        context = await build_managed_context(
            worker,
            task_text,
            history,
            memory=(*recalled.items(), *knowledge),
            config=self.context_config,
            llm=self.llm,
            provenance=manifest.provenance,
            thread_id=thread_id,
            skill_id=match.skill_id,
        )
        assert match.skill is not None
        depth = outcome.manifest.execution_depth or DEFAULT_DEPTH
        brief = duty_brief(outcome.duty, manifest.provenance.trigger_id, depth)  # joins the system prompt
        brief = "\n\n".join(p for p in (brief, guidance) if p)  # and the service's limits and escalation triggers
        engine_req = EngineRequest(
            run_id,
            match.skill,
            context.task,
            scope,
            brief,
            resume=req.resume,
            budget=depth_budget(tenant.tenant, depth),
            continuation=req.continuation,
        )
        settled = _Settled()  # the engine starts at once: its tool calls wait for `written` (scope.recorded)
        async for event in self._engine_events(engine_req, context, ref, question, settled):
            yield event
        result, tool_calls = settled.result, settled.tool_calls
        assert result is not None
        result = await self._settle_duty(worker, outcome, ref, result, settled)  # its contract, before it completes
        # Three independent files, durable together before RUN_FINISHED and RouteDone (the final event);
        # the memory index learns from the episode meanwhile and after (its readers wait for it).
        remembered = self._outcome(req, result, manifest.task_id, recalled, scope.secrets)
        async with self.files.pending() as ended:
            record, _, episode = await asyncio.gather(
                self.tasks.complete(ref, result, tool_calls=tool_calls),
                self._append_turn(session, req, run_id, result),
                self._episode(binding, remembered),
            )
        if self.memory is not None and remembered is not None and episode is not None:
            self.memory.learn_later(binding, remembered, episode)
        await written.durable()  # long done, unless the run called no tool
        await ended.durable()
        await self._ask_tool_approval(req, manifest, ref, result, decision.posture, match.skill.name)
        if settled.finished is not None:  # a client that sees RUN_FINISHED finds the run, turn and episode stored
            yield settled.finished
        yield RouteDone(result, record)

    async def _service_context(self, worker: Worker, text: str) -> tuple[tuple[MemoryItem, ...], str]:
        """A service worker's knowledge passages for `text` and its paragraph of the system prompt."""
        if self.service is None:
            return (), ""
        served = await self.service.context(worker, text)
        return served.knowledge, served.guidance

    async def _settle_duty(
        self, worker: Worker, outcome: GovernanceOutcome, ref: RunRef, result: RunResult, settled: _Settled
    ) -> RunResult:
        """A duty run's result checked against its contract before the run is recorded."""
        if self.duty_outcomes is None or outcome.duty is None:
            return result
        checked = await self.duty_outcomes.settle(worker, outcome.duty, ref, result, settled.tool_calls)
        if checked is not result:
            settled.finished = _finished(settled.finished, checked, ref.run_id)
        return checked

    async def _append_turn(
        self, session: ConversationSession | None, req: RouteRequest, run_id: str, result: RunResult
    ) -> None:
        """A completed or waiting run's two messages in its thread (other runs leave it as it was):
        a run that waits keeps its request in the thread its continuation runs in."""
        if session is not None and result.status in ("completed", "waiting"):
            await self.sessions.append(
                session, UserMessage(req.text, run_id=run_id), AssistantMessage(result.output, run_id=run_id)
            )

    def _outcome(
        self, req: RouteRequest, result: RunResult, task_id: str, recalled: RecallResult, secrets: tuple[str, ...]
    ) -> RunOutcome | None:
        """What memory keeps of a completed run (failed runs leave no memory)."""
        if self.memory is None or result.status != "completed":
            return None
        used = tuple(h.episode_id for h in recalled.hits)
        channel = channel_of(req.source_type, req.source_id)
        return RunOutcome(req.text, result.output, task_id, req.goal_id, channel, used, secrets)

    async def _episode(self, binding: MemoryBinding, outcome: RunOutcome | None) -> Episode | None:
        """The run's episode file; best effort, never raises."""
        if self.memory is None or outcome is None:
            return None
        return await self.memory.write_run(binding, outcome)

    async def _cross_channel(
        self, binding: MemoryBinding, req: RouteRequest, session: ConversationSession | None
    ) -> str | None:
        """Seed §2.3: a message that continues a matter from another channel gets a question, not an
        injection. The thread's next yes / no decides; an accepted summary joins this conversation's
        memory and is recalled from this run on. The question to append to the answer, or None."""
        if self.memory is None or session is None or binding.thread_id is None:
            return None
        answer = offer_answer(req.text)
        if answer is None and not looks_like_continuation(req.text):
            return None  # it neither answers an offer nor continues a matter: no file is read
        offers = self.memory.offers(binding.tenant_id, binding.worker_id)
        pending = await asyncio.to_thread(offers.pending, binding.thread_id)
        if pending:
            for offer in pending if answer is not None else ():
                with contextlib.suppress(LookupError, ValueError):  # decided meanwhile by another turn
                    await self.memory.decide_offer(binding, offer.offer_id, answer)  # type: ignore[arg-type]
            return None
        found = await self.memory.check_continuation(binding, req.text, channel_of(req.source_type, req.source_id))
        return found.question if found is not None else None

    async def _recall(
        self, binding: MemoryBinding, text: str, goal_id: str | None, session: ConversationSession | None
    ) -> RecallResult:
        if self.memory is None:
            return RecallResult()
        return await self.memory.recall_for_run(binding, text, goal_id=goal_id, exclude_runs=_runs_in(session))

    def _match_skill(self, worker: Worker, req: RouteRequest, outcome: GovernanceOutcome) -> SkillMatch | str:
        """The skill for this task, or why there is none."""
        try:
            match = self.matcher.match(
                worker,
                req.text,
                skill_id=req.skill_id,
                duty_skill_hint=outcome.manifest.skill_hint,
                preferred_skill_ids=outcome.manifest.preferred_skill_ids,
            )
        except UnknownSkillError as exc:
            return str(exc)
        return match if match.skill is not None else f"worker {worker.worker_id!r} has no skill for this request"

    async def _engine_events(
        self, engine_req: EngineRequest, context: ManagedContext, ref: RunRef, question: str | None, settled: _Settled
    ) -> AsyncIterator[EngineEvent]:
        """The engine's events for the client; its result, tool calls and RUN_FINISHED land in
        `settled`. A cross-channel `question` is appended to a completed answer."""
        async for item in self._engine(engine_req, context, ref):
            if isinstance(item, RunResult):
                settled.result = _asking(item, question)
                continue
            if isinstance(item, RunFinished):
                if self.service is not None:  # a hand-off made in this run: the user is told who took over
                    question = "\n\n".join(p for p in (question, self.service.take_notice(ref.run_id)) if p) or None
                if question and item.outcome == "completed":
                    yield TextDelta(f"\n\n{question}")
                    item = replace(item, output=f"{item.output}\n\n{question}")
                settled.finished = item  # sent once the run's files are written
                continue
            if isinstance(item, ToolCallResult):
                kind = "needs_approval" if item.outcome == "approval_required" else item.outcome
                settled.tool_calls.append(ToolCallRecord(item.name, item.call_id, kind))
            yield item

    async def _engine(
        self, engine_req: EngineRequest, context: ManagedContext, ref: RunRef
    ) -> AsyncIterator[EngineEvent | RunResult]:
        """Run the engine, streaming its events; one reactive retry on a provider context overflow."""
        for attempt in (1, 2):
            sink = _EventSink(hold_overflow=attempt == 1)
            stores = self.checkpoints or checkpoint_stores(self.registry.root)
            dispatcher = EngineDispatcher(
                EngineDeps(
                    self.llm,
                    self.tools.pipeline_for(self.resolve(ref.tenant_id, ref.worker_id)),
                    RunEngineState(self.tasks, ref.tenant_id, ref.worker_id, stores),
                    self.registry.root,
                )
            )
            task = asyncio.create_task(self._dispatch(dispatcher, _with_context(engine_req, context), sink))
            while (event := await sink.events.get()) is not None:
                yield event
            result = await task
            if result.error_code == "context_overflow" and attempt == 1:
                smaller = compact_for_overflow(context)
                if smaller.total_tokens < context.total_tokens:
                    context = smaller
                    continue
                for event in sink.held:
                    yield event
            yield result
            return

    @staticmethod
    async def _dispatch(dispatcher: EngineDispatcher, req: EngineRequest, sink: _EventSink) -> RunResult:
        try:
            return await dispatcher.run(req, sink.emit)
        finally:
            await sink.events.put(None)

    async def _gate(
        self, req: RouteRequest, manifest: TaskManifest, outcome: GovernanceOutcome, ref: RunRef
    ) -> AsyncIterator[RouterEvent]:
        reasons = tuple(f"{r.code}: {r.message}" for r in outcome.decision.reasons)
        confirmation = await self.confirmations.request(  # stored, then announced (inbox item, event)
            tenant_id=req.tenant_id,
            worker_id=req.worker_id,
            run_id=ref.run_id,
            task_id=manifest.task_id,
            thread_id=manifest.thread_id or "",
            text=req.text,
            skill_id=req.skill_id,
            gate_ref=outcome.gate_ref,
            reasons=reasons,
            source_type=req.source_type,
            source_id=req.source_id,
            duty_id=req.duty_id,
            trigger_id=req.trigger_id,
            goal_id=req.goal_id,
            evidence=req.evidence.as_json() or None,  # the approved run reaches the same gate with it
        )
        reason = "; ".join(r.message for r in outcome.decision.reasons if r.code != "default")
        call = ToolCall(confirmation.confirmation_id, "task", {"text": req.text})
        record = await self.tasks.wait_approval(ref, call, reason)
        yield ApprovalRequired(confirmation.confirmation_id, "task", req.text, reason)
        yield RunFinished(ref.run_id, "approval_required", "")
        pending = RunResult("approval_required", pending_approval=call, error=reason)
        yield RouteDone(pending, record)

    async def _ask_tool_approval(
        self, req: RouteRequest, manifest: TaskManifest, ref: RunRef, result: RunResult, posture: str, skill_id: str
    ) -> None:
        """A tool call or graph interrupt the run waits on becomes a confirmation (none: nothing),
        with the skill that ran and, from a ReAct loop, its checkpoint, so approval continues it."""
        call = result.pending_approval
        if call is None:
            return
        await self.confirmations.request(
            tenant_id=req.tenant_id,
            worker_id=req.worker_id,
            run_id=ref.run_id,
            task_id=manifest.task_id,
            thread_id=manifest.thread_id or "",
            text=req.text,
            skill_id=skill_id,
            gate_ref=None,
            reasons=(result.error or f"tool {call.name} needs a person's approval",),
            kind="interrupt" if result.continuation.get("kind") == "interrupt" else "tool",
            checkpoint=[dict(m) for m in result.checkpoint],
            continuation=dict(result.continuation) or None,  # a plan's or graph's: approval continues it
            tool_call={"id": call.id, "name": call.name, "arguments": dict(call.arguments)},
            posture=posture,
            approval_ref=manifest.provenance.approval_ref,
            source_type=req.source_type,
            source_id=req.source_id,
            duty_id=req.duty_id,
            trigger_id=req.trigger_id,
            goal_id=req.goal_id,
        )

    @staticmethod
    def _manifest(
        req: RouteRequest, outcome: GovernanceOutcome, thread_id: str, run_id: str, task_id: str, skill_id: str | None
    ) -> TaskManifest:
        m, d = outcome.manifest, outcome.decision
        verdict = GovernanceVerdict(d.action, d.posture, d.risk_tier, tuple(str(r) for r in d.reasons))
        provenance = TaskProvenance(
            source_type=m.source_type,
            source_id=m.source_id,
            goal_id=m.goal_id,
            duty_id=m.duty_id,
            trigger_id=m.trigger_id,
            execution_depth=m.execution_depth or DEFAULT_DEPTH,
            process_id=m.process_id,
            step_id=m.step_id,
            contract_version=m.contract_version,
            contract_snapshot_ref=m.contract_snapshot_ref,
            policy_snapshot_ref=m.policy_snapshot_ref,
            governance_decision=verdict,
            approval_ref=m.approval_ref,
            scheduled_for=req.scheduled_for,
            idempotency_key=req.idempotency_key,
            parent_run_id=req.parent.run_id if req.parent is not None else None,
            parent_worker_id=req.parent.worker_id if req.parent is not None else None,
            delegation_depth=req.delegation_depth if req.parent is not None else 0,
        )
        return TaskManifest(
            task_id=task_id,
            run_id=run_id,
            tenant_id=req.tenant_id,
            worker_id=req.worker_id,
            text=req.text,
            created_at=datetime.now(UTC),
            thread_id=thread_id,
            skill_id=skill_id,  # the caller's, or the one the matcher chose
            preferred_skill_ids=tuple(m.preferred_skill_ids),
            provenance=provenance,
            gate_level="gated" if d.action == "gated" else "auto",
        )


class _EventSink:
    """Where the engine's events go; a first attempt's context_overflow error is held back,
    because the reactive retry may still succeed."""

    def __init__(self, *, hold_overflow: bool) -> None:
        self.events: asyncio.Queue[EngineEvent | None] = asyncio.Queue()
        self.held: list[EngineEvent] = []
        self.hold_overflow = hold_overflow

    async def emit(self, event: EngineEvent) -> None:
        if self.hold_overflow and isinstance(event, RunError) and event.code == "context_overflow":
            self.held.append(event)
            return
        await self.events.put(event)


def _with_context(req: EngineRequest, context: ManagedContext) -> EngineRequest:
    """`req` with the assembled prompt: system text (then `req.system`, the duty brief), history and
    task from `context`."""
    system = "\n\n".join(p for p in (context.system_prompt, req.system) if p)
    return EngineRequest(
        req.run_id, req.skill, context.task, req.scope, system, tuple(context.history), req.purpose, req.resume,
        req.budget, req.continuation,
    )  # fmt: skip


def _pre_script(worker: Worker, outcome: GovernanceOutcome, goal_id: str | None) -> PreScript | None:
    """The duty's pre_script; for work a goal starts without one, the goal's `default_pre_script`."""
    if outcome.duty is not None and outcome.duty.pre_script is not None:
        return outcome.duty.pre_script
    goal = worker.goals.get(goal_id) if goal_id else None
    return goal.default_pre_script if goal is not None else None


def _runs_in(session: ConversationSession | None) -> tuple[str, ...]:
    """Runs whose turns are already in the thread's history (their episodes are not recalled again)."""
    if session is None:
        return ()
    return tuple(dict.fromkeys(r for m in session.messages if (r := getattr(m, "run_id", None))))


def history_from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[str, tuple[Message, ...]]:
    """(the last user message, everything before it) from an OpenAI-style messages list."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            content = messages[index].get("content")
            text = (
                content
                if isinstance(content, str)
                else " ".join(part.get("text", "") for part in content or () if isinstance(part, Mapping))
            )
            return text, tuple(dict(m) for m in messages[:index])
    raise RouteError("validation_error", "messages must contain a user message", 422)


def _record_decision(decision: GovernanceDecision, req: RouteRequest, run_id: str) -> None:
    """One metric and one log line per governance decision (the gate result, when the gate ran)."""
    if decision.gate_result is not None:
        record_gate_result(decision.gate_result)
    reasons = [str(r) for r in (*decision.reasons, *decision.gate_reasons)]
    log_decision(
        log, "governance", decision.action, gate=decision.gate_result, reasons=reasons,
        tenant_id=req.tenant_id, worker_id=req.worker_id, run_id=run_id, source_type=req.source_type,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Started:
    """A routed task before it runs: the governance outcome, the matched skill (or why none) when the
    decision is auto, and the manifest and run record as written (another run's, for a repeated
    idempotency key)."""

    outcome: GovernanceOutcome
    match: SkillMatch | str | None
    manifest: TaskManifest
    persisted: RunRecord


@dataclass
class _Settled:
    """What an engine run settled on, gathered while its events stream."""

    result: RunResult | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    finished: RunFinished | RunError | None = None  # or the RunError of a failed duty contract check


def _finished(finished: RunFinished | RunError | None, result: RunResult, run_id: str) -> RunFinished | RunError | None:
    """The stream's last engine event after the duty's contract changed the result: RUN_FINISHED
    with the repaired output, or the RunError of a failed check."""
    if result.status != "completed":
        return RunError(run_id, result.error_code, result.error)
    return replace(finished, output=result.output) if isinstance(finished, RunFinished) else finished


def _asking(result: RunResult, question: str | None) -> RunResult:
    """The run's answer with the cross-channel question after it (what the session and channels keep)."""
    if question is None or result.status != "completed":
        return result
    return replace(result, output=f"{result.output}\n\n{question}")
