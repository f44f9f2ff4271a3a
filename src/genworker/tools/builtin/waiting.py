"""wait_for_event: the model parks its own task as a WAITING plan, and the run ends waiting.

The call records a plan and nothing else: runtime state that cancelling the plan undoes, and the
run that resumes goes through governance again. So the tool is `compute`, risk low (reversible,
internal). A completed call carries `Suspend` in its result: the ReAct loop ends the run there
(state paused) instead of calling the model again. docs/waiting.md describes the flow.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from genworker.ids import validate_match_key
from genworker.tools.base import Effect, RiskLevel, Suspend, ToolResult
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.tool import FunctionTool, function_tool

__all__ = ["MAX_TIMEOUT_S", "WaitParker", "WaitRequest", "WaitSlot", "wait_for_event_tool"]

MAX_TIMEOUT_S: Final = 30 * 86_400
_MAX_REASON: Final = 500
_MAX_INSTRUCTIONS: Final = 4_000


@dataclass(frozen=True, slots=True)
class WaitRequest:
    plan_id: str  # from the run and the call: a retried call parks the same plan
    match_key: str
    reason: str
    timeout: timedelta | None  # None: the policy's default
    resume_instructions: str


WaitParker = Callable[[ToolScope, WaitRequest], Awaitable[object]]


class WaitSlot:
    """Where the tool parks runs; the composition fills it once the WAITING service exists."""

    def __init__(self) -> None:
        self.park: WaitParker | None = None


def wait_for_event_tool(slot: WaitSlot) -> FunctionTool:
    @function_tool(effect=Effect.COMPUTE, risk_level=RiskLevel.LOW)
    async def wait_for_event(
        ctx: ToolContext,
        match_key: str,
        reason: str,
        timeout_s: int | None = None,
        resume_instructions: str = "",
    ) -> ToolResult:
        """Pause this task until an external event arrives; the run ends now and continues in this
        thread when the event comes, with the event's payload as input.

        Call it when the next step depends on something that has not happened yet (a review, a
        reply, a deployment). Do not call it to wait for the user in this conversation.

        Args:
            match_key: The event to wait for, ':'-separated words, e.g. 'github:pr:42:merged'.
            reason: What you are waiting for and why, in one sentence (shown to the user).
            timeout_s: Seconds to wait before the wait is reported as overdue (default: 24 hours).
            resume_instructions: Notes to yourself: what to do when the event arrives.
        """
        problem = _problem(match_key, reason, timeout_s, resume_instructions)
        if problem is not None:
            return ToolResult(problem, is_error=True)
        if slot.park is None:
            return ToolResult("waiting for events is not available on this runtime", is_error=True)
        timeout = timedelta(seconds=timeout_s) if timeout_s is not None else None
        plan_id = _plan_id(ctx.scope.run_id, ctx.call.id)
        await slot.park(ctx.scope, WaitRequest(plan_id, match_key, reason.strip(), timeout, resume_instructions))
        message = f"Waiting for {match_key}: {reason.strip()}"
        return ToolResult(f"{message} (plan {plan_id}). This run ends now.", data=Suspend(message, plan_id))

    return wait_for_event


def _problem(match_key: str, reason: str, timeout_s: int | None, instructions: str) -> str | None:
    """What is wrong with the arguments, naming the argument; None when they are fine."""
    try:
        validate_match_key(match_key)
    except ValueError as exc:
        return str(exc)
    if not reason.strip() or len(reason) > _MAX_REASON:
        return f"reason must be 1-{_MAX_REASON} characters saying what you wait for"
    if timeout_s is not None and not 1 <= timeout_s <= MAX_TIMEOUT_S:
        return f"timeout_s={timeout_s} must be between 1 and {MAX_TIMEOUT_S} (30 days)"
    if len(instructions) > _MAX_INSTRUCTIONS:
        return f"resume_instructions must be at most {_MAX_INSTRUCTIONS} characters"
    return None


def _plan_id(run_id: str, call_id: str) -> str:
    return f"wait_{hashlib.sha256(f'{run_id}:{call_id}'.encode()).hexdigest()[:20]}"
