"""GraphContext: what a skill's graph factory receives, so its nodes reach models and tools only
through our LLM client and ToolPipeline (governance, audit, budgets).

    def build_graph(ctx):                      # the skill's `factory`
        async def draft(state):
            reply = await ctx.llm.invoke([{"role": "user", "content": state["task"]}], intent="draft")
            found = await ctx.tools.call("lookup", {"q": reply.content})
            ...
        return graph.compile(checkpointer=ctx.checkpointer)

A tool call that needs a person's approval interrupts the graph (`interrupt()`): the run waits, a
confirmation asks, and approving it resumes the graph, which then makes the call. A side-effecting
call is logged in the thread's checkpoint store before it runs and with its result after: when a
node runs again (a resume re-runs the node that was interrupted or cut short), a finished call
returns its logged result instead of running twice, and a call cut short is not run again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph.config import get_config
from langgraph.types import interrupt

from genworker.engine.base import EngineDeps, EngineRequest
from genworker.engine.events import Emit, TextDelta, ToolCallResult
from genworker.llm.client import ModelToolCall, StreamDone, TextChunk, recorded_tokens
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.tools.base import ToolCall
from genworker.tools.journal import SIDE_EFFECTS
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, outcome_text
from genworker.workspace.models.skill import GENERAL_BLOCK

__all__ = ["GraphBudgetExceeded", "GraphContext", "ModelReply", "OutcomeUnknown", "ToolReply"]


class GraphBudgetExceeded(Exception):
    """The run's rounds or token budget are spent: the graph stops."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class OutcomeUnknown(Exception):
    """A side-effecting call started in an earlier run and never finished: it is not run again."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    content: str
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolReply:
    content: str
    is_error: bool = False
    data: Any = None


class _Rounds:
    def __init__(self, limit: int | None) -> None:
        self.limit, self.used = limit, 0


def _node() -> tuple[str, str]:
    """(node name, task namespace) of the node calling; the namespace is stable when a node re-runs."""
    config = get_config()
    ns = str(config.get("configurable", {}).get("checkpoint_ns", ""))
    return str(config.get("metadata", {}).get("langgraph_node", "")), ns


class GraphModel:
    """`ctx.llm`: one model call per `invoke`, at the run's tier, counted against its budget."""

    def __init__(self, deps: EngineDeps, req: EngineRequest, emit: Emit, rounds: _Rounds) -> None:
        self.deps, self.req, self.emit, self.rounds = deps, req, emit, rounds

    async def invoke(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        intent: LLMCallIntent | str | None = None,
        tools: Sequence[str] | None = None,
        tool_choice: Mapping[str, Any] | None = None,
    ) -> ModelReply:
        budget = self.req.budget
        if self.rounds.limit is not None and self.rounds.used >= self.rounds.limit:
            raise GraphBudgetExceeded(
                "max_turns_exceeded", f"stopped: the graph made the {self.rounds.used} model calls its depth allows"
            )
        self.rounds.used += 1
        schemas = [s.openai_schema() for s in self.deps.tools.visible(self.req.scope) if s.name in (tools or ())]
        wanted = intent if isinstance(intent, LLMCallIntent) else None
        call = wanted or LLMCallIntent(
            Purpose.WORKFLOW_STEP, requires_tools=bool(schemas), tier=budget.tier if budget is not None else None
        )
        node, _ = _node()
        done = None
        async for event in self.deps.llm.stream(call, messages, schemas or None, tool_choice=tool_choice):
            if isinstance(event, TextChunk):
                await self.emit(TextDelta(event.text, node))
            elif isinstance(event, StreamDone):
                done = event.completion
        assert done is not None
        spent = recorded_tokens()
        if budget is not None and spent is not None and spent >= budget.token_budget:
            raise GraphBudgetExceeded(
                "budget_exceeded",
                f"stopped: the run's model calls used {spent} tokens, the {budget.depth} depth allows "
                f"{budget.token_budget}",
            )
        usage = {"prompt_tokens": done.record.prompt_tokens, "completion_tokens": done.record.completion_tokens}
        return ModelReply(done.text, done.tool_calls, usage)


class GraphTools:
    """`ctx.tools`: tool calls through the ToolPipeline, as a workflow's."""

    def __init__(self, deps: EngineDeps, req: EngineRequest, emit: Emit, thread: str) -> None:
        self.deps, self.req, self.emit, self.thread = deps, req, emit, thread
        self.calls = 0
        self._seen: dict[str, int] = {}

    def names(self) -> list[str]:
        return [s.name for s in self.deps.tools.visible(self.req.scope)]

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolReply:
        node, ns = _node()
        index = self._seen.get(ns, 0)
        self._seen[ns] = index + 1
        call = ToolCall(f"{self.thread}:{node}:{index}", name, dict(arguments or {}))
        key = f"{ns}#{index}:{name}"
        spec = next((s for s in self.deps.tools.visible(self.req.scope) if s.name == name), None)
        logged = spec is not None and (spec.effect is None or spec.effect in SIDE_EFFECTS)
        if logged:
            earlier = await self._effect(key)
            if earlier is not None and "result" in earlier:
                return ToolReply(**earlier["result"])
            if earlier is not None:
                raise OutcomeUnknown(
                    f"tool {name} ({earlier.get('call_id')}) started before the run stopped and never finished: "
                    "it may have happened, so it is not run again; a person decides"
                )
        reply = await self._run(call, logged, key)
        return reply

    execute = call  # upstream's spelling

    async def _run(self, call: ToolCall, logged: bool, key: str) -> ToolReply:
        scope = self.req.scope
        if logged:
            await self._put_effect(key, {"call_id": call.id, "tool": call.name})
        self.calls += 1
        outcome = await self.deps.tools.execute(scope, call, "workflow")
        if isinstance(outcome, ToolNeedsApproval):
            await self.emit(ToolCallResult(call.id, call.name, "approval_required", outcome.reason))
            answer = interrupt(
                {
                    "type": "tool_approval",
                    "tool": call.name,
                    "arguments": dict(call.arguments),
                    "reason": outcome.reason,
                }
            )
            if not (isinstance(answer, Mapping) and answer.get("approved")):
                reply = ToolReply(f"a person rejected the call to {call.name}", is_error=True)
                if logged:
                    await self._put_effect(key, {"call_id": call.id, "tool": call.name, "result": _plain(reply)})
                return reply
            outcome = await self.deps.tools.execute(
                replace(scope, approved_call_ids=frozenset({call.id})), call, "workflow"
            )
        reply = _reply(outcome)
        await self.emit(ToolCallResult(call.id, call.name, _kind(outcome), reply.content))
        if logged:
            await self._put_effect(key, {"call_id": call.id, "tool": call.name, "result": _plain(reply)})
        return reply

    async def _effect(self, key: str) -> dict[str, Any] | None:
        state = self.deps.state
        if state is None:
            return None
        found: dict[str, Any] | None = await asyncio.to_thread(state.checkpoints().effect, self.thread, key)
        return found

    async def _put_effect(self, key: str, record: dict[str, Any]) -> None:
        state = self.deps.state
        if state is None:
            return
        await asyncio.to_thread(state.checkpoints().put_effect, self.thread, key, record)


def _reply(outcome: Any) -> ToolReply:
    match outcome:
        case ToolCompleted(result=result):
            data = result.data
            try:
                json.dumps(data)
            except (TypeError, ValueError):
                data = None
            return ToolReply(result.content, result.is_error, data)
        case ToolDenied() | ToolFailed() | ToolNeedsApproval():
            return ToolReply(outcome_text(outcome), is_error=True)
    raise AssertionError(f"unexpected tool outcome {outcome!r}")


def _kind(outcome: Any) -> Any:
    if isinstance(outcome, ToolCompleted):
        return "completed"
    return "denied" if isinstance(outcome, ToolDenied) else "failed"


def _plain(reply: ToolReply) -> dict[str, Any]:
    return {"content": reply.content, "is_error": reply.is_error, "data": reply.data}


class GraphContext:
    """Given to the skill's graph factory: `llm`, `tools`, `checkpointer`, the skill's instruction
    blocks (`instruction(key)`), `intent(key)`, `interrupt(value)` and the run's ids and task."""

    def __init__(self, deps: EngineDeps, req: EngineRequest, emit: Emit, thread: str, checkpointer: Any) -> None:
        self.rounds = _Rounds(req.budget.max_rounds if req.budget is not None else None)
        self.llm = GraphModel(deps, req, emit, self.rounds)
        self.tools = GraphTools(deps, req, emit, thread)
        self.checkpointer = checkpointer
        self.task = req.task
        self.system = req.system
        self.run_id, self.thread_id = req.run_id, thread
        self.tenant_id, self.worker_id = req.scope.tenant_id, req.scope.worker_id
        self.skill_id = req.skill.name
        self._req = req

    def instruction(self, key: str = GENERAL_BLOCK) -> str:
        blocks = self._req.skill.blocks
        return blocks.get(key) or blocks.get(GENERAL_BLOCK) or self._req.skill.instructions

    def intent(self, key: str = "") -> LLMCallIntent:
        budget = self._req.budget
        return LLMCallIntent(Purpose.WORKFLOW_STEP, tier=budget.tier if budget is not None else None)

    @staticmethod
    def interrupt(value: Any) -> Any:
        """LangGraph's interrupt(): the run waits for a person; the answer is `{"approved": bool, "by": ...}`."""
        return interrupt(value)
