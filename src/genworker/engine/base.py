"""What every engine receives and returns, and the tagged outcome of one loop step."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from genworker.engine.events import FinishedOutcome
from genworker.llm.client import LLMCallRecord, LLMClient
from genworker.llm.intent import Purpose, Tier
from genworker.tools.base import ToolCall, ToolSpec
from genworker.tools.context import Caller, ToolScope
from genworker.tools.outcomes import ToolOutcome
from genworker.workspace.snapshot import Skill

__all__ = [
    "Continuation",
    "DepthBudget",
    "EngineDeps",
    "EngineRequest",
    "EngineState",
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
class Continuation:
    """This run continues an earlier one's saved engine state (a plan's nodes, a graph's checkpoints):
    after an approval, a graph interrupt's answer, or a process that died mid-run."""

    run_id: str  # the run whose plan (planning) or graph thread (langgraph) is continued
    approved: Mapping[str, str] = field(default_factory=dict)  # approved tool call id -> its result text
    answer: Mapping[str, Any] | None = None  # a graph interrupt's answer: {"approved": bool, "by": ...}


class EngineState(Protocol):
    """Where planning and LangGraph keep their state between steps and across runs (the run record
    and the checkpoint store of the run's worker)."""

    async def save_plan(self, run_id: str, plan: Any) -> None: ...

    async def load_plan(self, run_id: str) -> Any | None: ...

    async def save_graph(self, run_id: str, graph: Any) -> None: ...

    async def load_graph(self, run_id: str) -> Any | None: ...

    def checkpoints(self) -> Any:
        """The worker's checkpoint backend (engine/langgraph/checkpointer.py)."""
        ...


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
    continuation: Continuation | None = None  # planning / langgraph: pick up an earlier run's state


@dataclass(frozen=True, slots=True)
class EngineDeps:
    llm: LLMClient
    tools: ToolRunner
    state: EngineState | None = None  # None: plans and graphs live only as long as the run
    workspace_root: Path | None = None  # where LangGraph skills' graph modules are found
    guard: Callable[[], Awaitable[Interrupted | None]] | None = None  # asked between turns: a supervisor's stop


# -- one step of a loop ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunAgain:
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class FinalOutput:
    text: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    # waiting: a tool suspended the run; budget_exceeded: the depth's token budget (or a supervisor's
    # budget) is spent; supervisor_paused / supervisor_stopped: a supervisor's deterministic check
    reason: Literal[
        "max_turns_exceeded", "budget_exceeded", "condition_stopped", "supervisor_paused", "supervisor_stopped",
        "waiting",
    ]  # fmt: skip
    text: str = ""
    checkpoint: tuple[Message, ...] = ()  # a loop stopped between turns: its conversation, to resume it


@dataclass(frozen=True, slots=True)
class NeedsApproval:
    call: ToolCall
    reason: str
    # the conversation up to the call (its assistant message and the other calls' results): with
    # the approved call's result appended, the loop continues exactly where it stopped
    checkpoint: tuple[Message, ...] = ()


StepOutcome = RunAgain | FinalOutput | Interrupted | NeedsApproval


# -- the whole run ------------------------------------------------------------------

RunStatus = Literal[FinishedOutcome, "failed"]


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
    # approval_required in a plan or a graph: what approving continues ({"engine", "run_id", "kind", ...})
    continuation: Mapping[str, Any] = field(default_factory=dict)
