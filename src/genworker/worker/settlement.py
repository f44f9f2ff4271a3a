"""Settlement: how a routed run ends, and the events that tell its caller.

Each way to end returns the run's last events, RouteDone last, once everything they announce is
stored: a refused run (blocked, no skill, failed pre_script) is recorded as failed, a duty run's
escalations for that failure written down first, as an engine run's are; a gated one
waits for its confirmation; a duplicate returns the run its key made; an engine run's result is
checked against its duty's contract, then its run record, its turn in the thread and its episode
are made durable together before RUN_FINISHED, and a tool call it waits on becomes a confirmation.
`internal_error` records a bug or storage failure once the run was accepted (its escalations
planned likewise, at best effort); `ended` delivers a
duty run's result and makes its escalations before its RouteDone goes out.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from genworker.conversation import AssistantMessage, SessionManager, UserMessage
from genworker.conversation.models import ConversationSession
from genworker.engine.base import RunResult, RunStatus
from genworker.engine.events import ApprovalRequired, RunError, RunFinished
from genworker.memory import Episode, MemoryBinding, MemoryService, RecallResult, RunOutcome, channel_of
from genworker.observability.logging import internal_error_message, log_internal_error
from genworker.tools.base import ToolCall
from genworker.worker.admission import Admitted, Blocked, Duplicate, Gated
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.duty_steps import DutyOutcomeSteps
from genworker.worker.lifecycle import IllegalTransition, RunNotFound, TaskLifecycle
from genworker.worker.preparation import Prepared
from genworker.worker.routing import RouteDone, RouteRequest, RouterEvent
from genworker.worker.task import RunRef, ToolCallRecord
from genworker.workspace.snapshot import Worker
from genworker.write_journal import DurableFiles, Written

__all__ = ["EngineRun", "Settler"]

log = logging.getLogger("genworker.router")

Events = tuple[RouterEvent, ...]


@dataclass
class EngineRun:
    """What an engine run settled on, gathered while its events stream."""

    result: RunResult | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    finished: RunFinished | RunError | None = None  # sent once the run's files are written


@dataclass(frozen=True, slots=True)
class Settler:
    tasks: TaskLifecycle
    sessions: SessionManager
    confirmations: ConfirmationStore
    memory: MemoryService | None
    files: DurableFiles
    duty_outcomes: DutyOutcomeSteps | None

    @staticmethod
    def duplicate(admission: Duplicate) -> Events:
        """The run the idempotency key made first, as it is: never run twice."""
        first = admission.record
        status: RunStatus = "completed" if first.state == "completed" else "failed"
        return (RouteDone(RunResult(status, error_code="duplicate", error=f"already run as {first.run_id}"), first),)

    async def refuse(self, worker: Worker, ref: RunRef, blocked: Blocked) -> Events:
        """A run ended before its engine: a duty run's escalations planned, then the run failed."""
        result = RunResult("failed", error_code=blocked.code, error=blocked.message)
        await self._plan_failure(worker, ref, result)
        record = await self.tasks.fail(ref, blocked.code, blocked.message)
        return RunError(ref.run_id, blocked.code, blocked.message), RouteDone(result, record)

    async def gate(self, req: RouteRequest, ref: RunRef, gated: Gated) -> Events:
        """The task waits for a person: a confirmation stored, then announced (inbox item, event)."""
        outcome, manifest = gated.outcome, gated.manifest
        reasons = tuple(f"{r.code}: {r.message}" for r in outcome.decision.reasons)
        confirmation = await self.confirmations.request(
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
            preferred_skill_ids=req.preferred_skill_ids,
            evidence=req.evidence.as_json() or None,  # the approved run reaches the same gate with it
        )
        reason = "; ".join(r.message for r in outcome.decision.reasons if r.code != "default")
        call = ToolCall(confirmation.confirmation_id, "task", {"text": req.text})
        record = await self.tasks.wait_approval(ref, call, reason)
        pending = RunResult("approval_required", pending_approval=call, error=reason)
        return (
            ApprovalRequired(confirmation.confirmation_id, "task", req.text, reason),
            RunFinished(ref.run_id, "approval_required", ""),
            RouteDone(pending, record),
        )

    async def settle(
        self,
        req: RouteRequest,
        worker: Worker,
        admitted: Admitted,
        prepared: Prepared,
        session: ConversationSession | None,
        ran: EngineRun,
        written: Written,
    ) -> Events:
        """An engine run's end: its duty contract, then the run record, the turn and the episode."""
        ref = RunRef(req.tenant_id, req.worker_id, admitted.manifest.run_id)
        assert ran.result is not None
        result = await self._settle_duty(worker, admitted, ref, ran)
        # Three independent files, durable together before RUN_FINISHED and RouteDone (the final event);
        # the memory index learns from the episode meanwhile and after (its readers wait for it).
        binding = prepared.binding
        remembered = self._outcome(req, result, admitted.manifest.task_id, prepared.recalled, prepared.scope.secrets)
        async with self.files.pending() as ended:
            record, _, episode = await asyncio.gather(
                self.tasks.complete(ref, result, tool_calls=ran.tool_calls),
                self._append_turn(session, req, ref.run_id, result),
                self._episode(binding, remembered),
            )
        if self.memory is not None and remembered is not None and episode is not None:
            self.memory.learn_later(binding, remembered, episode)
        await written.durable()  # long done, unless the run called no tool
        await ended.durable()
        await self._ask_person(req, admitted, ref, result)
        # a client that sees RUN_FINISHED finds the run, turn and episode stored
        finished = (ran.finished,) if ran.finished is not None else ()
        return (*finished, RouteDone(result, record))

    async def internal_error(self, req: RouteRequest, worker: Worker, run_id: str, exc: Exception) -> Events:
        """A bug or a storage failure once the run was accepted: logged under an error id, the run
        recorded as failed (unless it had already ended; a duty run's escalations planned first, at
        best effort), then RunError and RouteDone, so a stream ends well-formed and says no more than
        the id. When the run cannot be recorded (no record, or the disk refuses), the original error
        goes on."""
        message = internal_error_message(log_internal_error(log, f"[Router] run {run_id} failed", exc))
        ref = RunRef(req.tenant_id, req.worker_id, run_id)
        result = RunResult("failed", error_code="internal_error", error=message)
        try:
            await self._plan_failure(worker, ref, result)
        except Exception:  # the run is still recorded failed; `ended` makes its escalations at once
            log.exception("[Router] run %s: the escalations of its internal error could not be planned", run_id)
        try:
            record = await self.tasks.fail(ref, "internal_error", message)
        except IllegalTransition:  # it had ended (say completed, then its turn could not be stored)
            record = await self.tasks.get_run(ref)
        except Exception:
            log.exception("[Router] run %s: its internal error could not be recorded", run_id)
            raise exc from None
        return RunError(run_id, "internal_error", message), RouteDone(result, record)

    async def ended(self, worker: Worker, event: RouterEvent) -> RouterEvent:
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

    async def _plan_failure(self, worker: Worker, ref: RunRef, result: RunResult) -> None:
        """A duty run about to be recorded failed without its engine's result: the escalations that
        failure calls for, on disk before it is recorded, so a stop in between leaves them owed (an
        ended run, a run never recorded, or not a duty's: nothing)."""
        if self.duty_outcomes is None or not worker.duties:
            return
        try:
            run = await self.tasks.get_run(ref)
        except RunNotFound:
            return
        duty = worker.duties.get(run.provenance.duty_id or "")
        if duty is not None and not run.terminal:
            await self.duty_outcomes.settle(worker, duty, ref, result, ())

    async def _settle_duty(self, worker: Worker, admitted: Admitted, ref: RunRef, ran: EngineRun) -> RunResult:
        """A duty run's result checked against its contract before the run is recorded."""
        result = ran.result
        assert result is not None
        duty = admitted.outcome.duty
        if self.duty_outcomes is None or duty is None:
            return result
        checked = await self.duty_outcomes.settle(worker, duty, ref, result, ran.tool_calls)
        if checked is not result:
            ran.finished = _finished(ran.finished, checked, ref.run_id)
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

    async def _ask_person(self, req: RouteRequest, admitted: Admitted, ref: RunRef, result: RunResult) -> None:
        """A tool call or graph interrupt the run waits on, or a supervisor's pause, becomes a confirmation
        (otherwise nothing), with the skill that ran and, from a ReAct loop, its checkpoint, so approval
        continues it."""
        call = result.pending_approval
        paused = result.status == "supervisor_paused" and bool(result.checkpoint)
        if call is None and not paused:
            return
        kind = "pause" if paused else "interrupt" if result.continuation.get("kind") == "interrupt" else "tool"
        reason = result.error or (f"tool {call.name} needs a person's approval" if call else "paused by a supervisor")
        manifest = admitted.manifest
        await self.confirmations.request(
            tenant_id=req.tenant_id,
            worker_id=req.worker_id,
            run_id=ref.run_id,
            task_id=manifest.task_id,
            thread_id=manifest.thread_id or "",
            text=req.text,
            skill_id=admitted.skill.name,
            gate_ref=None,
            reasons=(reason,),
            kind=kind,
            checkpoint=[dict(m) for m in result.checkpoint],
            continuation=dict(result.continuation) or None,  # a plan's or graph's: approval continues it
            tool_call={"id": call.id, "name": call.name, "arguments": dict(call.arguments)} if call else None,
            posture=admitted.outcome.decision.posture,
            approval_ref=manifest.provenance.approval_ref,
            source_type=req.source_type,
            source_id=req.source_id,
            duty_id=req.duty_id,
            trigger_id=req.trigger_id,
            goal_id=req.goal_id,
        )


def _finished(finished: RunFinished | RunError | None, result: RunResult, run_id: str) -> RunFinished | RunError | None:
    """The stream's last engine event after the duty's contract changed the result: RUN_FINISHED
    with the repaired output, or the RunError of a failed check."""
    if result.status != "completed":
        return RunError(run_id, result.error_code, result.error)
    return replace(finished, output=result.output) if isinstance(finished, RunFinished) else finished
