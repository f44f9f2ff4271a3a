"""EngineDispatcher: pick the engine from the skill's strategy mode, honour its fallback, and
turn every failure into an error event and a failed run — never into content."""

from __future__ import annotations

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
from genworker.engine.react import ReactLoop, initial_messages
from genworker.engine.workflow import StepFailed, WorkflowEngine
from genworker.llm.client import recording
from genworker.llm.errors import ContextOverflowError, ModelNotConfiguredError, ProviderError
from genworker.observability.logging import bind
from genworker.workspace.models.skill import StrategyMode

__all__ = ["AVAILABLE_MODES", "EngineDispatcher"]

AVAILABLE_MODES = frozenset({StrategyMode.AUTONOMOUS, StrategyMode.DETERMINISTIC, StrategyMode.HYBRID})


class EngineDispatcher:
    def __init__(self, deps: EngineDeps) -> None:
        self.deps = deps

    async def run(self, req: EngineRequest, emit: Emit) -> RunResult:
        scope = req.scope
        with recording() as calls, bind(tenant_id=scope.tenant_id, worker_id=scope.worker_id, run_id=req.run_id):
            result = await self._run(req, emit)
        return replace(result, llm_calls=tuple(calls))

    async def _run(self, req: EngineRequest, emit: Emit) -> RunResult:
        strategy = req.skill.spec.settings.strategy
        mode, fallback = strategy.mode, {}
        if mode not in AVAILABLE_MODES:
            if strategy.fallback is None or strategy.fallback.mode not in AVAILABLE_MODES:
                message = (
                    f"skill {req.skill.name}: strategy mode {mode.value!r} is not available "
                    "and it declares no usable fallback"
                )
                await emit(RunError(req.run_id, "engine_unavailable", message))
                return RunResult("failed", engine=mode.value, error_code="engine_unavailable", error=message)
            fallback = {
                "from": mode.value,
                "to": strategy.fallback.mode.value,
                "reason": f"{mode.value} is not available",
            }
            mode = strategy.fallback.mode
        await emit(RunStarted(req.run_id, mode.value, req.skill.name))
        result = await self._guarded(req, mode, emit)
        if result.error_code == "step_failed" and strategy.fallback is not None and not fallback:
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
            return await WorkflowEngine(self.deps, hybrid=mode == StrategyMode.HYBRID).run(req, emit)
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
        outcome = await loop.run(req.resume or initial_messages(req), req.skill.spec.settings.strategy.max_turns)
        match outcome:
            case FinalOutput(text=text):
                return RunResult("completed", text, "react", tool_calls=loop.tool_calls)
            case Interrupted(reason=reason, text=text):
                return RunResult(reason, text, "react", tool_calls=loop.tool_calls)
            case NeedsApproval(call=call, checkpoint=checkpoint):
                return RunResult(
                    "approval_required", "", "react", tool_calls=loop.tool_calls, pending_approval=call,
                    checkpoint=checkpoint,
                )  # fmt: skip
            case RunAgain():
                raise AssertionError("ReactLoop.run never returns RunAgain")
            case _:
                assert_never(outcome)
