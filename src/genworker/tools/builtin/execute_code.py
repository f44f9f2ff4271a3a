"""execute_code (L1 of the script channel): Python written by the model, run in the sandbox.

The code may call the run's other tools with `tools.call(name, **arguments)`; each call goes back
through the ToolPipeline (caller "script") over the RPC bridge. Same trust rule as bash_execute.
"""

from __future__ import annotations

from collections.abc import Callable

from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.builtin.bash import sandbox_refusal, trust_refusal
from genworker.tools.context import ToolContext
from genworker.tools.rpc_bridge import DEFAULT_MAX_CALLS, ScriptNestingError, ToolExecutor, run_script
from genworker.tools.sandbox import DEFAULT_LIMITS, SandboxError, SandboxLimits
from genworker.tools.tool import FunctionTool, function_tool

__all__ = ["execute_code_tool"]


def execute_code_tool(
    executor: Callable[[], ToolExecutor],
    limits: SandboxLimits = DEFAULT_LIMITS,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> FunctionTool:
    """The tool; `executor` returns the ToolPipeline it is registered in (built after the tool)."""

    @function_tool(effect=Effect.EXTERNAL, risk_level=RiskLevel.HIGH)
    async def execute_code(ctx: ToolContext, code: str, timeout: float | None = None) -> ToolResult:  # noqa: ASYNC109
        """Run Python 3 code in a sandbox (no network; the working folder is this run's scratch folder).

        Print what you want back. The code can call your other tools with
        `tools.call("tool_name", arg=value)`, which returns the tool's text result and raises
        `tools.ToolError` when the call is refused or fails.

        Args:
            code: The Python source to run.
            timeout: Seconds before the code is killed (capped by the sandbox limit).
        """
        refused = trust_refusal(ctx)
        if refused is not None:
            return refused
        try:
            result = await run_script(
                "python",
                code,
                scope=ctx.scope,
                executor=executor(),
                call_id=ctx.call.id,
                limits=limits.for_call(timeout, ctx.timeout_s),
                max_calls=max_calls,
            )
        except ScriptNestingError as exc:
            return ToolResult(str(exc), is_error=True)
        except SandboxError as exc:
            return sandbox_refusal(ctx, exc)
        return ToolResult(result.report(), is_error=not result.ok, data=result.as_dict())

    return execute_code
