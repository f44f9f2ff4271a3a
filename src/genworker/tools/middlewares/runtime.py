"""Bounding how long a call may run."""

from __future__ import annotations

import asyncio

from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.outcomes import ToolFailed, ToolOutcome

__all__ = ["timeout"]


async def timeout(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
    """Cancel the call after `ctx.timeout_s` seconds. A tool that runs work in a thread is only
    abandoned, not stopped: such tools must bound their own work."""
    try:
        async with asyncio.timeout(ctx.timeout_s):
            return await call_next(ctx)
    except TimeoutError:
        return ToolFailed("timeout", f"tool {ctx.spec.name} did not finish within {ctx.timeout_s:g}s")
