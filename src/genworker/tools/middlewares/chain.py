"""The middleware shape `(ctx, call_next) -> outcome` and how a chain is composed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from genworker.tools.context import ToolContext
from genworker.tools.outcomes import ToolDenied, ToolOutcome

__all__ = ["CallNext", "Hook", "Middleware", "compose"]

CallNext = Callable[[ToolContext], Awaitable[ToolOutcome]]
Middleware = Callable[[ToolContext, CallNext], Awaitable[ToolOutcome]]
Hook = Callable[[ToolContext], Awaitable[ToolDenied | None]]  # a pre-call check that may deny


def compose(middlewares: Sequence[Middleware], endpoint: CallNext) -> CallNext:
    """One callable running `middlewares` outermost first, then `endpoint`."""
    handler = endpoint
    for middleware in reversed(middlewares):
        handler = _bind(middleware, handler)
    return handler


def _bind(middleware: Middleware, call_next: CallNext) -> CallNext:
    async def handle(ctx: ToolContext) -> ToolOutcome:
        return await middleware(ctx, call_next)

    return handle
