"""ToolPipeline: the only path to any tool (builtin, script, MCP), for the model and for code alike.

`execute()` resolves the tool and its effect, then runs one chain composed at construction,
outermost first:

    audit -> redaction -> hooks -> governance (posture vs effect) -> permission
          -> schema -> approval -> [extra middlewares] -> timeout -> executor

`visible()` applies the same policy and posture checks to decide what the model is shown.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace

from genworker.tools.audit import AuditSink
from genworker.tools.base import HIDDEN_FROM_LLM, ToolCall, ToolDefinitionError, ToolResult, ToolSpec
from genworker.tools.context import Caller, ToolContext, ToolScope
from genworker.tools.effects import EffectResolver
from genworker.tools.middlewares import (
    Auditing,
    Hook,
    Middleware,
    SchemaValidation,
    approval,
    compose,
    governance,
    permission,
    policy_denial,
    posture_denial,
    redaction,
    redactor_for,
    run_hooks,
    timeout,
)
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolOutcome
from genworker.tools.tool import Tool

__all__ = ["ToolPipeline"]

log = logging.getLogger("genworker.tools")


class ToolPipeline:
    """Registry of tools plus the composed middleware chain every call goes through.

    `middlewares` are extra `(ctx, call_next)` middlewares; they run after every check has
    passed (and the call is approved), inside the timeout, outermost first.
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        *,
        hooks: Sequence[Hook] = (),
        effects: EffectResolver | None = None,
        audit: AuditSink | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self.effects = effects if effects is not None else EffectResolver()
        self._schemas = SchemaValidation()
        self._auditing = Auditing(audit)
        chain: list[Middleware] = [
            self._auditing,
            redaction,
            run_hooks(tuple(hooks)),
            governance,
            permission,
            self._schemas,
            approval,
            *middlewares,
            timeout,
        ]
        self._chain = compose(chain, self._invoke)
        for tool in tools:
            self.register(tool)

    # -- registry ------------------------------------------------------------------

    def register(self, tool: Tool) -> None:
        """Add a tool; a duplicate name or a broken parameters schema raises ToolDefinitionError."""
        name = tool.spec.name
        if name in self._tools:
            raise ToolDefinitionError(f"tool {name} is already registered")
        self._schemas.prepare(tool.spec)
        self._tools[name] = tool

    def unregister(self, name: str) -> Tool | None:
        self._schemas.forget(name)
        return self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    # -- what a run may see ----------------------------------------------------------

    def resolved_spec(self, spec: ToolSpec, scope: ToolScope | None = None) -> ToolSpec:
        """`spec` with effect, risk and approval as resolved for `scope`."""
        r = self.effects.resolve(spec, scope)
        return replace(spec, effect=r.effect, risk_level=r.risk_level, requires_approval=r.requires_approval)

    def visible(self, scope: ToolScope) -> list[ToolSpec]:
        """Resolved specs the model may be shown in this run: permitted by policy, allowed by the
        posture, not tagged hidden_from_llm. Registration order."""
        shown: list[ToolSpec] = []
        for tool in list(self._tools.values()):
            if HIDDEN_FROM_LLM in tool.spec.tags:
                continue
            spec = self.resolved_spec(tool.spec, scope)
            if policy_denial(scope, spec) is None and posture_denial(scope, spec) is None:
                shown.append(spec)
        return shown

    # -- calling -------------------------------------------------------------------

    async def execute(self, scope: ToolScope, call: ToolCall, caller: Caller = "llm") -> ToolOutcome:
        """Run one call through the chain. Never raises (except on cancellation)."""
        if scope.recorded is not None:
            await scope.recorded()
        tool = self._tools.get(call.name)
        if tool is None or (caller == "llm" and HIDDEN_FROM_LLM in tool.spec.tags):
            # the model is not told hidden tools exist
            unknown = ToolSpec(call.name, "", {})
            ctx = ToolContext(scope, call, unknown, caller, scope.default_timeout_s)
            outcome = ToolDenied("unknown_tool", f"there is no tool named {call.name!r}")
            await self._auditing.record(ctx, outcome, 0.0)
            return outcome
        spec = self.resolved_spec(tool.spec, scope)
        return await self._chain(ToolContext(scope, call, spec, caller, scope.default_timeout_s))

    async def _invoke(self, ctx: ToolContext) -> ToolOutcome:
        tool = self._tools.get(ctx.spec.name)
        if tool is None:
            return ToolFailed("error", f"tool {ctx.spec.name} was removed while the call was in flight")
        try:
            result = await tool.run(ctx, ctx.call.arguments)
        except TimeoutError as exc:  # the tool's own deadline (e.g. an MCP call_timeout)
            return ToolFailed("timeout", f"tool {ctx.spec.name} timed out: {exc}")
        except Exception as exc:
            _log_raised(ctx, exc)
            return ToolFailed("error", f"{type(exc).__name__}: {exc}")
        if not isinstance(result, ToolResult):
            return ToolFailed("error", f"tool {ctx.spec.name} returned {type(result).__name__}, not a ToolResult")
        return ToolCompleted(result)


# A tool refusing its arguments or told no by the outside world (no such file, a 404, a closed
# port): the model sees the error and can try otherwise. One line, not a traceback.
_EXPECTED = (ValueError, LookupError, OSError)


def _log_raised(ctx: ToolContext, exc: Exception) -> None:
    """An expected failure is one INFO line, the scope's secrets masked (its traceback at DEBUG);
    anything else looks like a bug in the tool: a WARNING with the traceback."""
    if isinstance(exc, _EXPECTED):
        error = redactor_for(ctx.scope.secrets).text(f"{type(exc).__name__}: {exc}")
        log.info("tool %s failed: %s", ctx.spec.name, error, exc_info=log.isEnabledFor(logging.DEBUG))
    else:
        log.warning("tool %s raised", ctx.spec.name, exc_info=exc)
