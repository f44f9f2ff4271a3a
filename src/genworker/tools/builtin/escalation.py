"""escalate_conversation: a service worker hands the conversation it is in over to a person or to
another worker of its tenant (PERSONA `service.escalation`).

Only a `mode: service` worker whose `service.escalation.enabled` is true is offered the tool; its
escalation triggers are in that worker's prompt (genworker.worker.service). It is `external` (risk
medium): a person is told, or another worker takes the thread. The hand-off itself is the
composition's (`genworker.worker.handoff`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.tool import FunctionTool, function_tool
from genworker.workspace.models.persona import WorkerMode
from genworker.workspace.snapshot import Worker

__all__ = ["ESCALATE", "EscalationSlot", "HandOffError", "escalation_tools", "unavailable_tools"]

ESCALATE = "escalate_conversation"
MAX_REASON = 500
MAX_SUMMARY = 4_000

HandOver = Callable[[ToolContext, str, str], Awaitable[str]]


class HandOffError(ValueError):
    """A hand-off the tool refuses or could not make; the message is fed back to the model."""


class EscalationSlot:
    """What the tool hands over through; the composition sets it once the router exists."""

    def __init__(self) -> None:
        self.hand_over: HandOver | None = None


def unavailable_tools(worker: Worker) -> frozenset[str]:
    """The escalation tool for every worker that is not a service with escalation enabled."""
    persona = worker.persona
    if persona.mode is WorkerMode.SERVICE and persona.service.escalation.enabled:
        return frozenset()
    return frozenset({ESCALATE})


def escalation_tools(slot: EscalationSlot) -> list[FunctionTool]:
    @function_tool(effect=Effect.EXTERNAL, risk_level=RiskLevel.MEDIUM, name=ESCALATE)
    async def escalate_conversation(ctx: ToolContext, reason: str, summary: str = "") -> ToolResult:
        """Hand this conversation over to the person or colleague your service escalates to, when one of
        your escalation triggers applies or you cannot help. They get the conversation so far; after this
        you no longer answer in it. Tell the user in one sentence that someone else takes it from here.

        Args:
            reason: Why you hand it over (one line).
            summary: What the user needs and what was tried, for whoever takes over.
        """
        reason, summary = reason.strip(), summary.strip()
        if not reason:
            raise HandOffError("reason is empty: say why you hand the conversation over")
        if len(reason) > MAX_REASON or len(summary) > MAX_SUMMARY:
            raise HandOffError(f"reason is at most {MAX_REASON} characters and summary at most {MAX_SUMMARY}")
        if slot.hand_over is None:
            raise HandOffError("handing conversations over is not available on this runtime")
        return ToolResult(await slot.hand_over(ctx, reason, summary))

    return [escalate_conversation]
