"""EngineDispatcher: pick the engine from the skill's strategy mode, honour its fallback, and
turn every failure into an error event and a failed run — never into content.

A skill whose engine cannot run here (a LangGraph skill without the `langgraph` extra, or whose
graph code its tenant may not run) runs its declared fallback (recorded on the run and logged as
such) or fails with `engine_unavailable`; nothing else is run in its place silently."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import assert_never

from genworker.engine.base import (
    EngineDeps,
    EngineRequest,
    FinalOutput,
    Interrupted,
    NeedsApproval,
    RunAgain,
    RunResult,
)
from genworker.engine.events import Emit, RunError, RunFinished, RunStarted
from genworker.engine.langgraph import graph_unavailable
from genworker.engine.planning import PlanningEngine
from genworker.engine.react import ReactLoop, initial_messages
from genworker.engine.workflow import RETRY_BASE_S, StepFailed, WorkflowEngine, recommended_tools_note
from genworker.llm.client import recording
from genworker.llm.errors import ContextOverflowError, ModelNotConfiguredError, ProviderError
from genworker.observability.logging import bind
from genworker.workspace.models.skill import StrategyMode

__all__ = ["AVAILABLE_MODES", "EngineDispatcher"]

log = logging.getLogger("genworker.engine")

# modes that run without anything more (LangGraph also needs the extra and a graph it may run)
AVAILABLE_MODES = frozenset(
    {StrategyMode.AUTONOMOUS, StrategyMode.DETERMINISTIC, StrategyMode.HYBRID, StrategyMode.PLANNING}
)
_WORKFLOW_MODES = frozenset({StrategyMode.DETERMINISTIC, StrategyMode.HYBRID})


class EngineDispatcher:
    def __init__(self, deps: EngineDeps, *, retry_base_s: float = RETRY_BASE_S) -> None:
        self.deps = deps
        self.retry_base_s = retry_base_s  # workflow steps with `retry.backoff: exponential`

    async def run(self, req: EngineRequest, emit: Emit) -> RunResult:
        scope = req.scope
        with recording() as calls, bind(tenant_id=scope.tenant_id, worker_id=scope.worker_id, run_id=req.run_id):
            result = await self._run(req, emit)
        return replace(result, llm_calls=tuple(calls))

    async def _run(self, req: EngineRequest, emit: Emit) -> RunResult:
        strategy = req.skill.spec.settings.strategy
        mode, fallback = strategy.mode, {}
        reason = _cannot_run(req)
        if reason:
            if strategy.fallback is None or strategy.fallback.mode not in AVAILABLE_MODES:
                code = "no_steps" if mode in _WORKFLOW_MODES else "engine_unavailable"
                message = f"skill {req.skill.name}: {reason}, and it declares no usable fallback"
                await emit(RunError(req.run_id, code, message))
                return RunResult("failed", engine=mode.value, error_code=code, error=message)
            fallback = {"from": mode.value, "to": strategy.fallback.mode.value, "reason": reason}
            log.warning("skill %s: %s; running its fallback %s", req.skill.name, reason, strategy.fallback.mode.value)
            mode = strategy.fallback.mode
        await emit(RunStarted(req.run_id, mode.value, req.skill.name))
        result = await self._guarded(req, mode, emit)
        if (
            result.error_code == "step_failed"
            and strategy.fallback is not None
            and not strategy.only_without_steps
            and not fallback
        ):
            target = strategy.fallback.mode
            if target in AVAILABLE_MODES and target != mode:
                fallback = {"from": mode.value, "to": target.value, "reason": result.error}
                result = await self._guarded(req, target, emit)
        result = replace(result, fallback=fallback)
        if result.status == "failed":
            await emit(RunError(req.run_id, result.error_code, result.error))
        else:
            await emit(RunFinished(req.run_id, result.status, result.output))
        return result

    async def _guarded(self, req: EngineRequest, mode: StrategyMode, emit: Emit) -> RunResult:
        try:
            if mode == StrategyMode.AUTONOMOUS:
                return await self._react(req, emit)
            if mode == StrategyMode.PLANNING:
                return await PlanningEngine(self.deps).run(req, emit)
            if mode == StrategyMode.LANGGRAPH:
                from genworker.engine.langgraph.engine import GraphEngine  # only with the extra installed

                return await GraphEngine(self.deps).run(req, emit)
            engine = WorkflowEngine(self.deps, hybrid=mode == StrategyMode.HYBRID, retry_base_s=self.retry_base_s)
            return await engine.run(req, emit)
        except ModelNotConfiguredError as exc:
            return RunResult("failed", engine=mode.value, error_code="model_not_configured", error=str(exc))
        except ContextOverflowError as exc:
            return RunResult("failed", engine=mode.value, error_code="context_overflow", error=str(exc))
        except ProviderError as exc:
            return RunResult("failed", engine=mode.value, error_code="provider_error", error=f"{exc.kind}: {exc}")
        except StepFailed as exc:
            return RunResult("failed", engine=mode.value, error_code="step_failed", error=str(exc))

    async def _react(self, req: EngineRequest, emit: Emit) -> RunResult:
        loop = ReactLoop(self.deps, req, emit)
        messages = req.resume or initial_messages(req, system_extra=recommended_tools_note(req.skill))
        outcome = await loop.run(messages, req.skill.spec.settings.strategy.max_turns)
        match outcome:
            case FinalOutput(text=text):
                return RunResult("completed", text, "react", tool_calls=loop.tool_calls)
            case Interrupted(reason=reason, text=text, checkpoint=checkpoint):
                # a spent budget or a supervisor's pause or stop: the run record says which and why
                error = text if reason in ("budget_exceeded", "supervisor_paused", "supervisor_stopped") else ""
                return RunResult(reason, text, "react", tool_calls=loop.tool_calls, error=error, checkpoint=checkpoint)
            case NeedsApproval(call=call, reason=reason, checkpoint=checkpoint):
                return RunResult(
                    "approval_required", "", "react", tool_calls=loop.tool_calls, pending_approval=call,
                    checkpoint=checkpoint, error=reason,  # why: the confirmation's reason
                )  # fmt: skip
            case RunAgain():
                raise AssertionError("ReactLoop.run never returns RunAgain")
            case _:
                assert_never(outcome)


def _cannot_run(req: EngineRequest) -> str:
    """Why the skill's own mode cannot run here ("" when it can)."""
    strategy = req.skill.spec.settings.strategy
    if strategy.mode == StrategyMode.LANGGRAPH:
        return graph_unavailable(req.skill, req.scope.trust_level)
    if strategy.mode in _WORKFLOW_MODES and not strategy.steps:
        return f"strategy mode {strategy.mode.value!r} has no steps"
    return ""
