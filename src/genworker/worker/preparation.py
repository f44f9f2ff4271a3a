"""Preparation: what an admitted run needs before its engine starts.

The thread's session (read inside the thread's turn, so a message queued behind a busy thread sees
the turn before it), the tool scope by posture, the duty's or goal's pre_script (run once, its
output joins the task text), the cross-channel question, recall, a service worker's knowledge, the
context under the token budget, and the engine request with the duty brief and the execution
depth's budget. `prepare` returns `Prepared`, or `Blocked` when the pre_script failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from genworker.conversation import SessionManager, to_model_messages
from genworker.conversation.models import ConversationSession
from genworker.engine.base import DepthBudget, EngineRequest
from genworker.llm.client import LLMClient
from genworker.llm.intent import Tier
from genworker.memory import MemoryBinding, MemoryService, RecallResult, channel_of
from genworker.memory.crosschannel import looks_like_continuation, offer_answer
from genworker.memory.models import MemoryItem
from genworker.tools.context import ToolScope
from genworker.tools.environment import ToolRuntime
from genworker.tools.middlewares.policy import matches_any
from genworker.tools.pre_script import PreScriptError, run_pre_script
from genworker.worker.admission import Admitted, Blocked
from genworker.worker.context import ContextWindowConfig, build_managed_context
from genworker.worker.context.models import ManagedContext
from genworker.worker.duty_brief import depth_budget, duty_brief
from genworker.worker.routing import RouteRequest, RunOverrides
from genworker.workspace.models.depth import DEFAULT_DEPTH
from genworker.workspace.models.duty import PreScript
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker
from genworker.write_journal import Written

if TYPE_CHECKING:
    from genworker.worker.service import ServiceDesk

__all__ = ["Prepared", "Preparer"]


@dataclass(frozen=True, slots=True)
class Prepared:
    engine: EngineRequest  # its prompt comes from `context` when it runs (context_overflow shrinks it)
    context: ManagedContext
    binding: MemoryBinding
    recalled: RecallResult
    question: str | None  # the cross-channel question the answer ends with
    scope: ToolScope


@dataclass(frozen=True, slots=True)
class Preparer:
    registry: WorkspaceRegistry
    llm: LLMClient
    tools: ToolRuntime
    sessions: SessionManager
    context_config: ContextWindowConfig | None
    memory: MemoryService | None
    service: ServiceDesk | None

    async def session(self, req: RouteRequest, thread_id: str) -> ConversationSession | None:
        """The thread's session for a conversational request (a new thread's is stored with its first turn)."""
        if not req.conversational:
            return None
        ttl = self.service.session_ttl(req) if self.service is not None else None  # idle service threads expire
        if req.thread_id is None:
            return self.sessions.unsaved_thread(req.tenant_id, req.worker_id, thread_id, ttl_s=ttl)
        session = await self.sessions.get_or_create_thread(req.tenant_id, req.worker_id, thread_id, ttl_s=ttl)
        return session if ttl is None or session.ttl_s == ttl else await self.sessions.set_ttl(session, ttl)

    async def prepare(
        self,
        req: RouteRequest,
        worker: Worker,
        admitted: Admitted,
        session: ConversationSession | None,
        written: Written,
    ) -> Prepared | Blocked:
        """The engine request of an admitted run. No tool acts before `written` (the run record) is
        durable: the scope waits for it, and a pre_script runs only after it."""
        manifest, decision = admitted.manifest, admitted.outcome.decision
        tenant = self.registry.tenant(req.tenant_id)
        assert tenant is not None
        scope = self.tools.scope(
            tenant.tenant,
            worker,
            manifest.run_id,
            posture=decision.posture,
            undo_window_s=decision.undo_window_s,
            skill_id=admitted.skill.name,  # wait_for_event records it, so the continuation keeps it
            conversational=session is not None,  # and whether the thread's history carries the request
            recorded=written.durable,
        )
        scope = _narrowed(scope, req.overrides)
        task_text = req.text
        pre_script = _pre_script(worker, admitted, manifest.provenance.goal_id)
        if pre_script is not None:  # run once, before the engine; its output joins the task text
            await written.durable()
            try:
                stdout = await run_pre_script(pre_script, scope, self.tools.pipeline_for(worker))
            except PreScriptError as exc:
                return Blocked("pre_script_failed", str(exc))
            task_text = f"{req.text}\n\n[pre_script output]\n{stdout.strip()}"
        history = to_model_messages(self.sessions.history(session)) if session is not None else req.history
        thread = manifest.thread_id if session is not None else None
        binding = MemoryBinding(req.tenant_id, req.worker_id, manifest.run_id, manifest.provenance.duty_id, thread)
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
            thread_id=manifest.thread_id,
            skill_id=admitted.skill.name,
        )
        depth = admitted.outcome.manifest.execution_depth or DEFAULT_DEPTH
        brief = duty_brief(admitted.outcome.duty, manifest.provenance.trigger_id, depth)  # joins the system prompt
        brief = "\n\n".join(p for p in (brief, guidance) if p)  # and the service's limits and escalation triggers
        brief = "\n\n".join(p for p in (brief, req.overrides.instructions if req.overrides else "") if p)
        engine = EngineRequest(
            manifest.run_id,
            admitted.skill,
            context.task,
            scope,
            brief,
            resume=req.resume,
            budget=_tiered(depth_budget(tenant.tenant, depth), req.overrides),
            continuation=req.continuation,
        )
        return Prepared(engine, context, binding, recalled, question, scope)

    async def _service_context(self, worker: Worker, text: str) -> tuple[tuple[MemoryItem, ...], str]:
        """A service worker's knowledge passages for `text` and its paragraph of the system prompt."""
        if self.service is None:
            return (), ""
        served = await self.service.context(worker, text)
        return served.knowledge, served.guidance

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


def _pre_script(worker: Worker, admitted: Admitted, goal_id: str | None) -> PreScript | None:
    """The duty's pre_script; for work a goal starts without one, the goal's `default_pre_script`."""
    duty = admitted.outcome.duty
    if duty is not None and duty.pre_script is not None:
        return duty.pre_script
    goal = worker.goals.get(goal_id) if goal_id else None
    return goal.default_pre_script if goal is not None else None


def _runs_in(session: ConversationSession | None) -> tuple[str, ...]:
    """Runs whose turns are already in the thread's history (their episodes are not recalled again)."""
    if session is None:
        return ()
    return tuple(dict.fromkeys(r for m in session.messages if (r := getattr(m, "run_id", None))))


def _narrowed(scope: ToolScope, overrides: RunOverrides | None) -> ToolScope:
    """An experiment variant's tool set within the worker's: a tool both allow-lists let through."""
    if overrides is None or overrides.tools is None:
        return scope
    allowed, own = frozenset(overrides.tools), scope.worker_allowed_tools
    if own is not None:
        allowed = frozenset(t for t in allowed if matches_any(t, own)) | {t for t in own if matches_any(t, allowed)}
    return replace(scope, worker_allowed_tools=allowed)


def _tiered(budget: DepthBudget, overrides: RunOverrides | None) -> DepthBudget:
    """An experiment variant's model tier for the run's turns."""
    if overrides is None or overrides.tier is None:
        return budget
    return replace(budget, tier=Tier(overrides.tier))
