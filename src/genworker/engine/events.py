"""The one internal event stream every engine emits; the API layer encodes it (SSE / AG-UI)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ApprovalRequired",
    "Custom",
    "Emit",
    "EngineEvent",
    "FinishedOutcome",
    "RunError",
    "RunFinished",
    "RunStarted",
    "StepFinished",
    "StepStarted",
    "TextDelta",
    "ToolCallArgs",
    "ToolCallEnd",
    "ToolCallResult",
    "ToolCallStart",
]


@dataclass(frozen=True, slots=True)
class RunStarted:
    run_id: str
    engine: str
    skill: str


# how a run that did not fail ended (RunStatus is this or "failed"; docs/runs.md maps each to a run state)
FinishedOutcome = Literal[
    "completed",
    "max_turns_exceeded",
    "budget_exceeded",
    "approval_required",
    "condition_stopped",
    "supervisor_paused",
    "supervisor_stopped",
    "waiting",
]


@dataclass(frozen=True, slots=True)
class RunFinished:
    run_id: str
    outcome: FinishedOutcome
    output: str


@dataclass(frozen=True, slots=True)
class RunError:
    run_id: str
    code: str  # model_not_configured, provider_error, context_overflow, tool_error, engine_error
    message: str


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    step_id: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArgs:
    call_id: str
    delta: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    call_id: str


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    call_id: str
    name: str
    outcome: Literal["completed", "denied", "approval_required", "failed"]
    content: str


@dataclass(frozen=True, slots=True)
class StepStarted:
    step_id: str
    kind: str


@dataclass(frozen=True, slots=True)
class StepFinished:
    step_id: str
    status: Literal["completed", "skipped", "failed"]
    output: Any = None


@dataclass(frozen=True, slots=True)
class ApprovalRequired:
    call_id: str
    tool: str
    arguments: str
    reason: str


@dataclass(frozen=True, slots=True)
class Custom:
    """A named side event beside the chat (AG-UI CUSTOM), e.g. a supervisor's comment."""

    name: str
    value: Any


EngineEvent = (
    RunStarted
    | RunFinished
    | RunError
    | TextDelta
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolCallResult
    | StepStarted
    | StepFinished
    | ApprovalRequired
    | Custom
)

Emit = Callable[[EngineEvent], Awaitable[None]]
