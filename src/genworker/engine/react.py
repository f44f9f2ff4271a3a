"""ReAct: the OpenAI tool-calling loop. One turn = one model call, then its tool calls.

A run's execution depth (`EngineRequest.budget`) caps the turns below the skill's own limit, picks
the model tier of every turn, and stops the loop once the run's model calls have used its token
budget (checked between turns: a turn in flight finishes).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, assert_never

from genworker.engine.base import (
    EngineDeps,
    EngineRequest,
    FinalOutput,
    Interrupted,
    Message,
    NeedsApproval,
    RunAgain,
    StepOutcome,
)
from genworker.engine.events import (
    ApprovalRequired,
    Emit,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)
from genworker.llm.client import Completion, ModelToolCall, StreamDone, TextChunk, ToolCallChunk, recorded_tokens
from genworker.llm.intent import LLMCallIntent
from genworker.tools.base import Suspend, ToolCall
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, ToolOutcome, outcome_text

__all__ = ["ReactLoop", "initial_messages"]


def initial_messages(req: EngineRequest, task: str | None = None, system_extra: str = "") -> tuple[Message, ...]:
    system = "\n\n".join(p for p in (req.system, req.skill.instructions, system_extra) if p.strip())
    head: list[Message] = [{"role": "system", "content": system}] if system else []
    return (*head, *req.history, {"role": "user", "content": task if task is not None else req.task})


class ReactLoop:
    """Runs turns until the model answers without tool calls, or max_turns (capped by the depth's
    rounds) is reached, or the depth's token budget is spent."""

    def __init__(self, deps: EngineDeps, req: EngineRequest, emit: Emit, *, step_id: str = "") -> None:
        self.deps, self.req, self.emit, self.step_id = deps, req, emit, step_id
        self.tool_calls = 0
        self.schemas = [spec.openai_schema() for spec in deps.tools.visible(req.scope)]

    async def run(self, messages: tuple[Message, ...], max_turns: int) -> StepOutcome:
        budget = self.req.budget
        if budget is not None:
            max_turns = min(max_turns, budget.max_rounds)
        for _ in range(max_turns):
            outcome = await self.turn(messages)
            match outcome:
                case RunAgain(messages=messages):
                    if self.deps.guard is not None and (stop := await self.deps.guard()) is not None:
                        return replace(stop, checkpoint=messages)  # a paused run resumes from here
                    spent = recorded_tokens()
                    if budget is not None and spent is not None and spent >= budget.token_budget:
                        return Interrupted(
                            "budget_exceeded",
                            f"stopped: the run's model calls used {spent} tokens, the {budget.depth} depth "
                            f"allows {budget.token_budget}",
                        )
                    continue
                case FinalOutput() | NeedsApproval() | Interrupted():
                    return outcome
                case _:
                    assert_never(outcome)
        depth = f" (the {budget.depth} depth's limit)" if budget is not None and budget.max_rounds == max_turns else ""
        return Interrupted("max_turns_exceeded", f"stopped after {max_turns} turns{depth} without a final answer")

    async def turn(self, messages: tuple[Message, ...]) -> StepOutcome:
        completion = await self._model(messages)
        if not completion.tool_calls:
            return FinalOutput(completion.text)
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": completion.text or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in completion.tool_calls
            ],
        }
        outcomes = await asyncio.gather(*(self._call(c) for c in completion.tool_calls))
        replies = [
            {"role": "tool", "tool_call_id": c.id, "content": outcome_text(o)}
            for c, o in zip(completion.tool_calls, outcomes, strict=True)
        ]
        for call, outcome in zip(completion.tool_calls, outcomes, strict=True):
            if isinstance(outcome, ToolNeedsApproval):
                others = tuple(r for r in replies if r["tool_call_id"] != call.id)
                pending = ToolCall(call.id, call.name, _parse(call.arguments) or {})
                return NeedsApproval(pending, outcome.reason, (*messages, assistant, *others))
        suspend = _suspend(outcomes)
        if suspend is not None:  # e.g. wait_for_event: the run ends here, waiting
            await self.emit(TextDelta(suspend.message, self.step_id))
            return Interrupted("waiting", suspend.message)
        return RunAgain((*messages, assistant, *replies))

    async def _model(self, messages: Sequence[Message]) -> Completion:
        tier = self.req.budget.tier if self.req.budget is not None else None
        intent = LLMCallIntent(self.req.purpose, requires_tools=bool(self.schemas), tier=tier)
        open_calls: dict[int, str] = {}
        async for event in self.deps.llm.stream(intent, messages, self.schemas or None):
            match event:
                case TextChunk(text=text):
                    await self.emit(TextDelta(text, self.step_id))
                case ToolCallChunk(index=index, id=call_id, name=name, arguments=args):
                    if call_id and index not in open_calls:
                        open_calls[index] = call_id
                        await self.emit(ToolCallStart(call_id, name or ""))
                    if args and index in open_calls:
                        await self.emit(ToolCallArgs(open_calls[index], args))
                case StreamDone(completion=completion):
                    for call_id in open_calls.values():
                        await self.emit(ToolCallEnd(call_id))
                    return completion
                case _:
                    assert_never(event)
        raise RuntimeError("model stream ended without a completion")

    async def _call(self, call: ModelToolCall) -> ToolOutcome:
        self.tool_calls += 1
        arguments = _parse(call.arguments)
        if arguments is None:
            outcome: ToolOutcome = ToolFailed(
                "invalid_arguments", f"arguments are not a JSON object: {call.arguments[:200]!r}"
            )
        else:
            outcome = await self.deps.tools.execute(self.req.scope, ToolCall(call.id, call.name, arguments), "llm")
        await self.emit(ToolCallResult(call.id, call.name, _kind(outcome), outcome_text(outcome)))
        if isinstance(outcome, ToolNeedsApproval):
            await self.emit(ApprovalRequired(call.id, call.name, call.arguments, outcome.reason))
        return outcome


def _parse(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _suspend(outcomes: Sequence[ToolOutcome]) -> Suspend | None:
    for outcome in outcomes:
        if isinstance(outcome, ToolCompleted) and isinstance(outcome.result.data, Suspend):
            return outcome.result.data
    return None


def _kind(outcome: ToolOutcome) -> Any:
    match outcome:
        case ToolCompleted():
            return "completed"
        case ToolDenied():
            return "denied"
        case ToolNeedsApproval():
            return "approval_required"
        case ToolFailed():
            return "failed"
        case _:
            assert_never(outcome)
