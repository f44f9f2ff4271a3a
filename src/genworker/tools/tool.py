"""What the pipeline executes: the `Tool` protocol, and `@function_tool`, which makes a FunctionTool of
an async function (its schema from the type hints and docstring, through `tool_spec_from`)."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from genworker.tools.base import Effect, RiskLevel, ToolDefinitionError, ToolResult, ToolSpec, tool_spec_from
from genworker.tools.context import ToolContext

__all__ = ["FunctionTool", "Tool", "function_tool"]


class Tool(Protocol):
    """Anything the pipeline can execute. Executors never check policy: the pipeline does."""

    @property
    def spec(self) -> ToolSpec: ...

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class FunctionTool:
    spec: ToolSpec
    fn: Callable[..., Awaitable[Any]]
    takes_context: bool

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        value = await (self.fn(ctx, **arguments) if self.takes_context else self.fn(**arguments))
        return value if isinstance(value, ToolResult) else ToolResult(_text(value), data=value)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def function_tool(
    *,
    effect: Effect,
    risk_level: RiskLevel = RiskLevel.LOW,
    requires_approval: bool = False,
    name: str | None = None,
    tags: frozenset[str] = frozenset(),
) -> Callable[[Callable[..., Awaitable[Any]]], FunctionTool]:
    """Declare an async function as a tool. A first parameter named `ctx` receives the ToolContext."""

    def wrap(fn: Callable[..., Awaitable[Any]]) -> FunctionTool:
        if not inspect.iscoroutinefunction(fn):
            raise ToolDefinitionError(f"tool {fn.__qualname__} must be an async function")
        spec, takes_context = tool_spec_from(fn, name=name)
        spec = ToolSpec(
            spec.name, spec.description, spec.parameters, effect, risk_level, requires_approval, tags, "builtin"
        )
        return FunctionTool(spec, fn, takes_context)

    return wrap
