"""A middleware place filled after the pipelines are built: a higher layer (the composition root)
puts its middleware there; until then, and when emptied, calls pass straight on."""

from __future__ import annotations

from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext, Middleware
from genworker.tools.outcomes import ToolOutcome

__all__ = ["MiddlewareSlot"]


class MiddlewareSlot:
    def __init__(self) -> None:
        self.middleware: Middleware | None = None

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        middleware = self.middleware
        if middleware is None:
            return await call_next(ctx)
        return await middleware(ctx, call_next)
