"""bash_execute: a shell command in the sandbox, in the run's scratch folder.

Effect external, risk high. Besides the pipeline's trust check (external needs trust level 2),
the tool refuses on its own below MIN_TRUST_LEVEL: a shell must never run because one policy
layer was misconfigured.
"""

from __future__ import annotations

from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.sandbox import DEFAULT_LIMITS, SandboxError, SandboxLimits, prepare_scratch, run_sandboxed
from genworker.tools.tool import FunctionTool, function_tool
from genworker.workspace.models.tenant import MIN_TRUST_LEVEL

__all__ = ["bash_execute_tool", "sandbox_refusal", "trust_refusal"]


def trust_refusal(ctx: ToolContext) -> ToolResult | None:
    """An error result when the run's trust level is below MIN_TRUST_LEVEL."""
    if ctx.scope.trust_level >= MIN_TRUST_LEVEL:
        return None
    return ToolResult(
        f"{ctx.spec.name} needs trust level {MIN_TRUST_LEVEL}; tenant {ctx.scope.tenant_id} has "
        f"{ctx.scope.trust_level}",
        is_error=True,
    )


def sandbox_refusal(ctx: ToolContext, exc: SandboxError) -> ToolResult:
    """The error result when the sandbox could not start the process (run_sandboxed logged why)."""
    return ToolResult(f"{ctx.spec.name} could not start: {exc}", is_error=True)


def bash_execute_tool(limits: SandboxLimits = DEFAULT_LIMITS) -> FunctionTool:
    @function_tool(effect=Effect.EXTERNAL, risk_level=RiskLevel.HIGH)
    async def bash_execute(ctx: ToolContext, command: str, timeout: float | None = None) -> ToolResult:  # noqa: ASYNC109
        """Run a bash command in a sandbox whose working folder is this run's scratch folder.

        There is no network; only the scratch folder is writable and files there last for the run.
        Output is capped, and the command is killed at its time limit.

        Args:
            command: The bash command line.
            timeout: Seconds before the command is killed (capped by the sandbox limit).
        """
        refused = trust_refusal(ctx)
        if refused is not None:
            return refused
        scratch = await prepare_scratch(ctx.scope)
        try:
            result = await run_sandboxed(
                ["bash", "--noprofile", "--norc", "-c", command],
                cwd=scratch,
                limits=limits.for_call(timeout, ctx.timeout_s),
            )
        except SandboxError as exc:
            return sandbox_refusal(ctx, exc)
        return ToolResult(result.report(), is_error=not result.ok, data=result.as_dict())

    return bash_execute
