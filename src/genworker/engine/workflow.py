"""Workflow (deterministic) and Hybrid engines: the skill's declared steps, one at a time.

Step kinds: `tool` (arguments rendered from earlier outputs), `llm` (a named instruction
block), `condition` (an expression over outputs, or prose judged by the model; false skips
the next step, or stops the run with `on_false: stop`), and — in hybrid mode only —
`autonomous` (a bounded ReAct loop on an instruction block). No model call happens unless a
step asks for one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from genworker.engine.base import (
    EngineDeps,
    EngineRequest,
    FinalOutput,
    Interrupted,
    NeedsApproval,
    RunAgain,
    RunResult,
)
from genworker.engine.events import ApprovalRequired, Emit, StepFinished, StepStarted, ToolCallResult
from genworker.engine.expressions import NotAnExpression, evaluate, render
from genworker.engine.react import ReactLoop, initial_messages
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.tools.base import ToolCall
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, outcome_text
from genworker.workspace.models.skill import WorkflowStep

__all__ = ["StepFailed", "WorkflowEngine"]


class StepFailed(Exception):
    def __init__(self, step_id: str, message: str) -> None:
        self.step_id = step_id
        super().__init__(f"step {step_id!r}: {message}")


@dataclass(frozen=True, slots=True)
class _Value:
    value: Any


@dataclass(frozen=True, slots=True)
class _SkipNext:
    pass


_Outcome = _Value | _SkipNext | FinalOutput | Interrupted | NeedsApproval


class WorkflowEngine:
    def __init__(self, deps: EngineDeps, *, hybrid: bool) -> None:
        self.deps = deps
        self.hybrid = hybrid

    async def run(self, req: EngineRequest, emit: Emit) -> RunResult:
        steps = req.skill.spec.settings.strategy.steps
        state: dict[str, Any] = {"input": req.task}
        skip = False
        last: Any = ""
        tool_calls = 0
        engine = "hybrid" if self.hybrid else "workflow"
        for step in steps:
            if skip:
                skip = False
                await emit(StepFinished(step.id, "skipped"))
                continue
            await emit(StepStarted(step.id, step.kind))
            outcome = await self._step(req, step, state, emit)
            tool_calls += step.kind == "tool"
            match outcome:
                case _Value(value=value):
                    state[step.output or step.id] = value
                    last = value
                    await emit(StepFinished(step.id, "completed", value))
                case _SkipNext():
                    skip = True
                    await emit(StepFinished(step.id, "completed", False))
                case Interrupted(reason=reason, text=text):
                    await emit(StepFinished(step.id, "completed", False))
                    return RunResult(reason, text or _text(last), engine, tool_calls=tool_calls, step_outputs=state)
                case NeedsApproval(call=call):
                    return RunResult(
                        "approval_required",
                        "",
                        engine,
                        tool_calls=tool_calls,
                        pending_approval=call,
                        step_outputs=state,
                    )
                case FinalOutput():
                    raise AssertionError("workflow steps do not produce a final output")
                case _:
                    assert_never(outcome)
        return RunResult("completed", _text(last), engine, tool_calls=tool_calls, step_outputs=state)

    async def _step(self, req: EngineRequest, step: WorkflowStep, state: dict[str, Any], emit: Emit) -> _Outcome:
        match step.kind:
            case "tool":
                return await self._tool(req, step, state, emit)
            case "llm":
                return _Value(await self._llm(req, step, state, emit))
            case "condition":
                return await self._condition(req, step, state)
            case "autonomous":
                return await self._autonomous(req, step, state, emit)
        raise StepFailed(step.id, f"unknown step kind {step.kind!r}")

    async def _tool(self, req: EngineRequest, step: WorkflowStep, state: Mapping[str, Any], emit: Emit) -> _Outcome:
        assert step.tool is not None
        try:
            arguments = render(dict(step.arguments), state)
        except KeyError as exc:
            raise StepFailed(step.id, f"cannot fill arguments: {exc.args[0]}") from None
        call = ToolCall(f"{req.run_id}:{step.id}", step.tool, arguments)
        outcome = await self.deps.tools.execute(req.scope, call, "workflow")
        match outcome:
            case ToolCompleted(result=result):
                await emit(ToolCallResult(call.id, call.name, "completed", result.content))
                if result.is_error:
                    raise StepFailed(step.id, f"tool {step.tool} reported an error: {result.content[:300]}")
                return _Value(result.data if result.data is not None else result.content)
            case ToolNeedsApproval(reason=reason):
                await emit(ToolCallResult(call.id, call.name, "approval_required", reason))
                await emit(ApprovalRequired(call.id, call.name, json.dumps(arguments, default=str), reason))
                return NeedsApproval(call, reason)
            case ToolDenied() | ToolFailed():
                await emit(
                    ToolCallResult(
                        call.id,
                        call.name,
                        "denied" if isinstance(outcome, ToolDenied) else "failed",
                        outcome_text(outcome),
                    )
                )
                raise StepFailed(step.id, outcome_text(outcome))
            case _:
                assert_never(outcome)

    def _block(self, req: EngineRequest, step: WorkflowStep) -> str:
        key = step.instructions or ""
        block = req.skill.blocks.get(key)
        if block is None:
            raise StepFailed(step.id, f"no '## instructions.{key}' block in {req.skill.file}")
        return block

    def _context(self, state: Mapping[str, Any]) -> str:
        parts = [f"## {name}\n{_text(value)}" for name, value in state.items()]
        return "\n\n".join(parts)

    async def _llm(self, req: EngineRequest, step: WorkflowStep, state: Mapping[str, Any], emit: Emit) -> str:
        messages = [
            {"role": "system", "content": "\n\n".join(p for p in (req.system, self._block(req, step)) if p)},
            {"role": "user", "content": self._context(state)},
        ]
        completion = await self.deps.llm.complete(LLMCallIntent(Purpose.WORKFLOW_STEP), messages)
        return completion.text

    async def _condition(self, req: EngineRequest, step: WorkflowStep, state: Mapping[str, Any]) -> _Outcome:
        assert step.condition is not None
        try:
            holds = evaluate(step.condition, state)
        except NotAnExpression:
            holds = await self._judge(step.condition, state)
        if holds:
            return _Value(True)
        on_false = (step.model_extra or {}).get("on_false", "skip_next")
        return Interrupted("condition_stopped") if on_false == "stop" else _SkipNext()

    async def _judge(self, condition: str, state: Mapping[str, Any]) -> bool:
        messages = [
            {
                "role": "system",
                "content": "Answer with exactly one word, yes or no: is the statement true of the data?",
            },
            {"role": "user", "content": f"Statement: {condition}\n\nData:\n{self._context(state)}"},
        ]
        completion = await self.deps.llm.complete(LLMCallIntent(Purpose.CONDITION), messages)
        return completion.text.strip().lower().startswith("yes")

    async def _autonomous(
        self, req: EngineRequest, step: WorkflowStep, state: Mapping[str, Any], emit: Emit
    ) -> _Outcome:
        if not self.hybrid:
            raise StepFailed(step.id, "autonomous steps need strategy mode 'hybrid'")
        loop = ReactLoop(self.deps, req, emit, step_id=step.id)
        messages = initial_messages(req, self._context(state), system_extra=self._block(req, step))
        outcome = await loop.run(messages, req.skill.spec.settings.strategy.max_turns)
        match outcome:
            case FinalOutput(text=text):
                return _Value(text)
            case NeedsApproval() | Interrupted():
                return outcome
            case RunAgain():
                raise AssertionError("ReactLoop.run never returns RunAgain")
            case _:
                assert_never(outcome)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
