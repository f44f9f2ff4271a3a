"""Workflow (deterministic) and Hybrid engines: the skill's declared steps, one at a time.

Step kinds: `tool` (arguments rendered from earlier outputs), `llm` (a named instruction
block: one model call, offered the step's `tools` if it lists any, whose tool calls are run),
`condition` (an expression over outputs, or prose judged by the model; false skips the next
step, or stops the run with `on_false: stop`), and — in hybrid mode only — `autonomous` (a
ReAct loop on an instruction block, `max_rounds` turns, the step's `tools` only when it lists
any). A step that fails is tried again up to `retry.max_attempts` times. No model call happens
unless a step asks for one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
from genworker.llm.client import ModelToolCall
from genworker.llm.errors import ContextOverflowError, ProviderError
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.tools.base import ToolCall, ToolSpec
from genworker.tools.context import ToolScope
from genworker.tools.middlewares.policy import matches_any
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, outcome_text
from genworker.workspace.models.skill import GENERAL_BLOCK, WorkflowStep
from genworker.workspace.snapshot import Skill

__all__ = ["StepFailed", "WorkflowEngine", "recommended_tools_note"]

RETRY_BASE_S = 1.0  # exponential backoff: 1 s, 2 s, 4 s ... between attempts (fixed: none)
RETRY_MAX_S = 30.0


def recommended_tools_note(skill: Skill) -> str:
    """The skill's `recommended_tools` as a prompt section (a hint, not a grant)."""
    tools = skill.spec.settings.recommended_tools
    return f"## Recommended tools\nPrefer these tools for this skill: {', '.join(tools)}" if tools else ""


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
    def __init__(self, deps: EngineDeps, *, hybrid: bool, retry_base_s: float = RETRY_BASE_S) -> None:
        self.deps = deps
        self.hybrid = hybrid
        self.retry_base_s = retry_base_s

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
            outcome, calls = await self._attempts(req, step, state, emit)
            tool_calls += calls
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

    async def _attempts(
        self, req: EngineRequest, step: WorkflowStep, state: dict[str, Any], emit: Emit
    ) -> tuple[_Outcome, int]:
        """Run a step up to `retry.max_attempts` times; the last failure fails the step."""
        attempts = step.retry.max_attempts
        calls = 0
        for attempt in range(1, attempts + 1):
            counter = _Calls()
            try:
                outcome = await self._step(req, step, state, emit, counter)
                return outcome, calls + counter.n
            except (StepFailed, ProviderError) as exc:
                calls += counter.n
                if attempt == attempts or isinstance(exc, ContextOverflowError):
                    if attempts > 1 and isinstance(exc, StepFailed):
                        raise StepFailed(step.id, f"failed after {attempts} attempts: {_reason(exc)}") from exc
                    raise
                await emit(StepFinished(step.id, "failed", f"attempt {attempt} of {attempts}: {_reason(exc)}"))
                if step.retry.backoff == "exponential":
                    await asyncio.sleep(min(self.retry_base_s * 2 ** (attempt - 1), RETRY_MAX_S))
                await emit(StepStarted(step.id, step.kind))
        raise AssertionError("unreachable")

    async def _step(
        self, req: EngineRequest, step: WorkflowStep, state: dict[str, Any], emit: Emit, calls: _Calls
    ) -> _Outcome:
        match step.kind:
            case "tool":
                calls.n += 1
                return await self._tool(req, step, state, emit)
            case "llm":
                return await self._llm(req, step, state, emit, calls)
            case "condition":
                return await self._condition(req, step, state)
            case "autonomous":
                return await self._autonomous(req, step, state, emit, calls)
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
        block = req.skill.blocks.get(key, req.skill.blocks.get(GENERAL_BLOCK))  # upstream: general stands in
        if block is None:
            raise StepFailed(step.id, f"no '## instructions.{key}' block in {req.skill.file}")
        return block

    def _scope(self, req: EngineRequest, step: WorkflowStep) -> ToolScope:
        """The run's scope narrowed to the step's `tools` (names or patterns), if it lists any."""
        if not step.tools:
            return req.scope
        names = [s.name for s in self.deps.tools.visible(req.scope) if matches_any(s.name, step.tools)]
        return replace(req.scope, worker_allowed_tools=frozenset(names))

    def _context(self, state: Mapping[str, Any]) -> str:
        parts = [f"## {name}\n{_text(value)}" for name, value in state.items()]
        return "\n\n".join(parts)

    async def _llm(
        self, req: EngineRequest, step: WorkflowStep, state: Mapping[str, Any], emit: Emit, calls: _Calls
    ) -> _Outcome:
        """One model call; with step tools, the calls it makes are run and their results are the
        step's output (a single listed tool is forced, as upstream's deterministic steps do)."""
        scope = self._scope(req, step)
        offered: list[ToolSpec] = self.deps.tools.visible(scope) if step.tools else []
        messages = [
            {"role": "system", "content": "\n\n".join(p for p in (req.system, self._block(req, step)) if p)},
            {"role": "user", "content": self._context(state)},
        ]
        forced = offered[0].name if len(offered) == 1 and len(step.tools) == 1 else None
        completion = await self.deps.llm.complete(
            LLMCallIntent(  # the run's execution depth picks the tier, as for ReAct turns
                Purpose.WORKFLOW_STEP, requires_tools=bool(offered), tier=req.budget.tier if req.budget else None
            ),
            messages,
            [spec.openai_schema() for spec in offered] or None,
            tool_choice={"type": "function", "function": {"name": forced}} if forced else None,
        )
        if not completion.tool_calls:
            return _Value(completion.text)
        results: list[str] = []
        for model_call in completion.tool_calls:
            calls.n += 1
            outcome = await self._model_call(req, scope, step, model_call, emit)
            if isinstance(outcome, NeedsApproval):
                return outcome
            results.append(outcome)
        return _Value("\n".join(results))

    async def _model_call(
        self, req: EngineRequest, scope: ToolScope, step: WorkflowStep, model_call: ModelToolCall, emit: Emit
    ) -> str | NeedsApproval:
        try:
            arguments = json.loads(model_call.arguments or "{}")
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            bad = model_call.arguments[:200]
            raise StepFailed(step.id, f"{model_call.name}: arguments are not a JSON object: {bad!r}")
        call = ToolCall(model_call.id or f"{req.run_id}:{step.id}", model_call.name, arguments)
        outcome = await self.deps.tools.execute(scope, call, "llm")
        match outcome:
            case ToolCompleted(result=result):
                await emit(ToolCallResult(call.id, call.name, "completed", result.content))
                if result.is_error:
                    raise StepFailed(step.id, f"tool {call.name} reported an error: {result.content[:300]}")
                return result.content
            case ToolNeedsApproval(reason=reason):
                await emit(ToolCallResult(call.id, call.name, "approval_required", reason))
                await emit(ApprovalRequired(call.id, call.name, model_call.arguments, reason))
                return NeedsApproval(call, reason)
            case ToolDenied() | ToolFailed():
                denied = isinstance(outcome, ToolDenied)
                await emit(ToolCallResult(call.id, call.name, "denied" if denied else "failed", outcome_text(outcome)))
                raise StepFailed(step.id, outcome_text(outcome))
            case _:
                assert_never(outcome)

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
        self, req: EngineRequest, step: WorkflowStep, state: Mapping[str, Any], emit: Emit, calls: _Calls
    ) -> _Outcome:
        if not self.hybrid:
            raise StepFailed(step.id, "autonomous steps need strategy mode 'hybrid'")
        scoped = replace(req, scope=self._scope(req, step))
        loop = ReactLoop(self.deps, scoped, emit, step_id=step.id)
        extra = "\n\n".join(p for p in (self._block(req, step), recommended_tools_note(req.skill)) if p)
        messages = initial_messages(scoped, self._context(state), system_extra=extra)
        try:
            outcome = await loop.run(messages, step.max_rounds or req.skill.spec.settings.strategy.max_turns)
        finally:
            calls.n += loop.tool_calls
        match outcome:
            case FinalOutput(text=text):
                return _Value(text)
            case NeedsApproval() | Interrupted():
                return outcome
            case RunAgain():
                raise AssertionError("ReactLoop.run never returns RunAgain")
            case _:
                assert_never(outcome)


@dataclass(slots=True)
class _Calls:
    n: int = 0  # tool calls one attempt of a step made


def _reason(exc: Exception) -> str:
    return str(exc).removeprefix(f"step {exc.step_id!r}: ") if isinstance(exc, StepFailed) else str(exc)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
