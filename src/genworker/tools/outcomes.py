"""The tagged result of one trip through the ToolPipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from genworker.tools.base import ToolResult

__all__ = ["ToolCompleted", "ToolDenied", "ToolFailed", "ToolNeedsApproval", "ToolOutcome"]


@dataclass(frozen=True, slots=True)
class ToolCompleted:
    result: ToolResult


@dataclass(frozen=True, slots=True)
class ToolDenied:
    code: Literal["unknown_tool", "denied_by_tenant", "denied_by_worker", "trust_level", "posture", "hook"]
    reason: str


@dataclass(frozen=True, slots=True)
class ToolNeedsApproval:
    reason: str


@dataclass(frozen=True, slots=True)
class ToolFailed:
    code: Literal["invalid_arguments", "timeout", "error", "conflict"]  # conflict: the Conflict Arbiter said replan
    error: str


ToolOutcome = ToolCompleted | ToolDenied | ToolNeedsApproval | ToolFailed


def outcome_text(outcome: ToolOutcome) -> str:
    """What the model sees for an outcome (errors are fed back so it can adapt)."""
    match outcome:
        case ToolCompleted(result=result):
            return result.content
        case ToolDenied(code=code, reason=reason):
            return f"[tool denied: {code}] {reason}"
        case ToolNeedsApproval(reason=reason):
            return f"[approval required] {reason}"
        case ToolFailed(code=code, error=error):
            return f"[tool failed: {code}] {error}"
