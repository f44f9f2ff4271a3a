"""What every engine receives and returns, and the tagged outcome of one loop step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from genworker.llm.client import LLMCallRecord, LLMClient
from genworker.llm.intent import Purpose, Tier
from genworker.tools.base import ToolCall, ToolSpec
from genworker.tools.context import Caller, ToolScope
from genworker.tools.outcomes import ToolOutcome
from genworker.workspace.snapshot import Skill

__all__ = [
    "DepthBudget",
    "EngineDeps",
    "EngineRequest",
    "FinalOutput",
    "Interrupted",
    "NeedsApproval",
    "RunAgain",
    "RunResult",
    "RunStatus",
    "StepOutcome",
    "ToolRunner",
]

Message = Mapping[str, Any]


class ToolRunner(Protocol):
    """The part of the ToolPipeline engines use."""

    def visible(self, scope: ToolScope) -> list[ToolSpec]: ...

    async def execute(self, scope: ToolScope, call: ToolCall, caller: Caller = "llm") -> ToolOutcome: ...


@dataclass(frozen=True, slots=True)
class DepthBudget:
    """What the run's execution depth buys (the tenant's `execution_depths`): the model tier of its
    ReAct turns, at most `max_rounds` turns per loop (below the skill's own max_turns), and
    `token_budget` tokens over all of its model calls."""

    depth: str
    tier: Tier
    max_rounds: int
    token_budget: int


@dataclass(frozen=True, slots=True)
class EngineRequest:
    run_id: str
    skill: Skill
    task: str  # the user's request / the task text
    scope: ToolScope
    system: str = ""  # assembled system prompt (identity, rules, ...)
    history: tuple[Message, ...] = ()
    purpose: Purpose = Purpose.TASK
    resume: tuple[Message, ...] = ()  # a ReAct loop continues from this conversation instead of starting one
    budget: DepthBudget | None = None  # None: the skill's max_turns, the purpose's tier, no token budget


@dataclass(frozen=True, slots=True)
class EngineDeps:
    llm: LLMClient
    tools: ToolRunner


# -- one step of a loop ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunAgain:
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class FinalOutput:
    text: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    # waiting: a tool suspended the run; budget_exceeded: the depth's token budget is spent
    reason: Literal["max_turns_exceeded", "budget_exceeded", "condition_stopped", "waiting"]
    text: str = ""


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    call: ToolCall
    reason: str
    # the conversation up to the call (its assistant message and the other calls' results): with
    # the approved call's result appended, the loop continues exactly where it stopped
    checkpoint: tuple[Message, ...] = ()


StepOutcome = RunAgain | FinalOutput | Interrupted | NeedsApproval


# -- the whole run ------------------------------------------------------------------

RunStatus = Literal[
    "completed", "max_turns_exceeded", "budget_exceeded", "approval_required", "condition_stopped", "waiting", "failed"
]


@dataclass(frozen=True, slots=True)
class RunResult:
    status: RunStatus
    output: str = ""
    engine: str = ""
    error_code: str = ""
    error: str = ""
    llm_calls: tuple[LLMCallRecord, ...] = ()
    tool_calls: int = 0
    pending_approval: ToolCall | None = None
    fallback: Mapping[str, str] = field(default_factory=dict)  # {"from", "to", "reason"} when used
    step_outputs: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: tuple[Message, ...] = ()  # approval_required in a ReAct loop: where to continue (NeedsApproval)
