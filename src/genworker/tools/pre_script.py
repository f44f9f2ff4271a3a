"""Pre-scripts (L2 of the script channel): a Duty/Task `pre_script` run once before the task.

Its output is injected into the task text by the caller (the router). Three kinds:

- `inline` code and a `path` (relative to the worker folder, inside it) run in the sandbox with the
  RPC bridge, so the tools they call go through the ToolPipeline — only `enabled_tools` when the
  pre_script lists some, at most `max_tool_calls`. Like bash, they need trust level 2;
- `ref` (upstream genworker's `{tool_name, tool_input}`) is one call of that tool through the
  pipeline, under the tool's own trust and approval rules; its text result is the output.

A pre_script that fails fails the run (`pre_script_failed`); upstream genworker instead puts
`[pre_script error: ...]` into the task and runs it anyway.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from typing import assert_never

from genworker.ids import is_inside
from genworker.tools.base import ToolCall
from genworker.tools.context import Caller, ToolScope
from genworker.tools.middlewares.policy import matches_any
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, ToolOutcome
from genworker.tools.rpc_bridge import ScriptNestingError, ToolExecutor, run_script
from genworker.tools.sandbox import DEFAULT_LIMITS, SandboxError, SandboxLimits, SandboxResult
from genworker.workspace.models.base import thaw
from genworker.workspace.models.duty import PreScript
from genworker.workspace.models.tenant import MIN_TRUST_LEVEL

__all__ = ["PRE_SCRIPT_LIMITS", "PreScriptError", "run_pre_script"]

PRE_SCRIPT_LIMITS = replace(DEFAULT_LIMITS, wall_timeout_s=600.0, cpu_s=120)  # ceiling; the duty sets `timeout`


class PreScriptError(RuntimeError):
    """The pre-script could not run or did not succeed; `result` is set when it ran."""

    def __init__(self, message: str, result: SandboxResult | None = None) -> None:
        super().__init__(message)
        self.result = result


async def run_pre_script(
    pre_script: PreScript,
    scope: ToolScope,
    pipeline: ToolExecutor | None,
    *,
    limits: SandboxLimits = PRE_SCRIPT_LIMITS,
    call_id: str | None = None,
) -> str:
    """Run `pre_script` once (code in the run's scratch folder, or its tool call) and return its output."""
    call_id = call_id or f"{scope.run_id}.pre_script"
    if pre_script.kind == "ref":
        return await _call_tool(pre_script, scope, pipeline, call_id)
    where = f"pre_script {pre_script.path!r}" if pre_script.path is not None else "inline pre_script"
    if scope.trust_level < MIN_TRUST_LEVEL:
        raise PreScriptError(
            f"{where}: pre-scripts need trust level {MIN_TRUST_LEVEL}; tenant {scope.tenant_id} has {scope.trust_level}"
        )
    source = pre_script.inline if pre_script.inline is not None else await _read(scope.worker_dir, where, pre_script)
    executor = pipeline
    if pipeline is not None and pre_script.enabled_tools:
        executor = _EnabledTools(pipeline, pre_script.enabled_tools)
    try:
        result = await run_script(
            pre_script.language,
            source,
            scope=scope,
            executor=executor,
            call_id=call_id,
            limits=limits.for_call(pre_script.timeout),
            max_calls=pre_script.max_tool_calls,
        )
    except (SandboxError, ScriptNestingError) as exc:
        raise PreScriptError(f"{where} could not run: {exc}") from exc
    problem = result.problem()
    if problem is not None:
        tail = result.stderr.strip()[-2000:]
        raise PreScriptError(f"{where} failed: {problem}" + (f"\n{tail}" if tail else ""), result)
    return result.stdout


@dataclass(frozen=True, slots=True)
class _EnabledTools:
    """The pipeline, refusing every tool the pre_script does not list in `enabled_tools`."""

    pipeline: ToolExecutor
    enabled: tuple[str, ...]

    async def execute(self, scope: ToolScope, call: ToolCall, caller: Caller = "llm") -> ToolOutcome:
        if not matches_any(call.name, self.enabled):
            return ToolDenied("denied_by_worker", f"tool {call.name} is not in the pre_script's enabled_tools")
        return await self.pipeline.execute(scope, call, caller)


async def _call_tool(pre_script: PreScript, scope: ToolScope, pipeline: ToolExecutor | None, call_id: str) -> str:
    where = f"pre_script tool {pre_script.tool_name!r}"
    if pipeline is None:
        raise PreScriptError(f"{where}: no tool pipeline to call it through")
    call = ToolCall(call_id, str(pre_script.tool_name), thaw(pre_script.tool_input))
    try:
        async with asyncio.timeout(pre_script.timeout):
            outcome = await pipeline.execute(scope, call, caller="script")
    except TimeoutError:
        raise PreScriptError(f"{where} timed out after {pre_script.timeout:g}s") from None
    match outcome:
        case ToolCompleted(result=result) if not result.is_error:
            return result.content
        case ToolCompleted(result=result):
            raise PreScriptError(f"{where} failed: {result.content}")
        case ToolDenied(reason=reason):
            raise PreScriptError(f"{where} was refused: {reason}")
        case ToolNeedsApproval(reason=reason):
            raise PreScriptError(f"{where} needs a person's approval ({reason}); a pre_script cannot wait for it")
        case ToolFailed(error=error):
            raise PreScriptError(f"{where} failed: {error}")
        case _:
            assert_never(outcome)


async def _read(worker_dir: Path, where: str, pre_script: PreScript) -> str:
    path = worker_dir / str(pre_script.path)
    if not is_inside(worker_dir, path):
        raise PreScriptError(f"{where}: the path must stay inside the worker folder")
    try:
        return await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PreScriptError(f"{where}: cannot read {path}: {exc}") from exc
