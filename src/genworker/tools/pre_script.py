"""Pre-scripts (L2 of the script channel): a Duty/Task `pre_script` run once before the task.

Its stdout is injected into the task text by the caller (TaskRunner). `path` is relative to the
worker folder and must stay inside it. Like bash, a pre-script needs trust level 2. It runs in
the sandbox with the RPC bridge, so the tools it calls go through the ToolPipeline.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from genworker.ids import is_inside
from genworker.tools.context import ToolScope
from genworker.tools.rpc_bridge import ScriptNestingError, ToolExecutor, run_script
from genworker.tools.sandbox import DEFAULT_LIMITS, MIN_TRUST_LEVEL, SandboxError, SandboxLimits, SandboxResult
from genworker.workspace.models.duty import PreScript

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
    """Run `pre_script` once in the run's scratch folder and return its stdout."""
    where = f"pre_script {pre_script.path!r}" if pre_script.path is not None else "inline pre_script"
    if scope.trust_level < MIN_TRUST_LEVEL:
        raise PreScriptError(
            f"{where}: pre-scripts need trust level {MIN_TRUST_LEVEL}; tenant {scope.tenant_id} has {scope.trust_level}"
        )
    source = pre_script.inline if pre_script.inline is not None else await _read(scope.worker_dir, where, pre_script)
    try:
        result = await run_script(
            pre_script.language,
            source,
            scope=scope,
            executor=pipeline,
            call_id=call_id or f"{scope.run_id}.pre_script",
            limits=limits.for_call(pre_script.timeout),
        )
    except (SandboxError, ScriptNestingError) as exc:
        raise PreScriptError(f"{where} could not run: {exc}") from exc
    problem = result.problem()
    if problem is not None:
        tail = result.stderr.strip()[-2000:]
        raise PreScriptError(f"{where} failed: {problem}" + (f"\n{tail}" if tail else ""), result)
    return result.stdout


async def _read(worker_dir: Path, where: str, pre_script: PreScript) -> str:
    path = worker_dir / str(pre_script.path)
    if not is_inside(worker_dir, path):
        raise PreScriptError(f"{where}: the path must stay inside the worker folder")
    try:
        return await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PreScriptError(f"{where}: cannot read {path}: {exc}") from exc
