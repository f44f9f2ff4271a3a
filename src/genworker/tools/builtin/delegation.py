"""delegate_to_worker, spawn_task and spawn_subagents: a run starts work on another worker of its
tenant, or new runs of its own worker, as child runs linked to it.

All three are `delegate` effects (risk high): hidden in the read-only postures, they need trust level
2, and in a run given an undo window they are held first. The handler checks again whatever the
effect tables say (an override cannot make delegation a `read`): the run's posture must let it act,
and the tenant's and worker's tool policy and the trust level must allow a delegate effect. The
runner the composition sets (`genworker.worker.delegation`) then checks the run's recorded
governance, the depth and fan-out bounds, and routes each child through the one pipeline, always in
the calling run's tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.policy import policy_denial, posture_denial
from genworker.tools.tool import FunctionTool, function_tool

__all__ = [
    "DELEGATE_TOOLS",
    "MAX_TASK_CHARS",
    "ChildOutcome",
    "DelegationError",
    "DelegationRequest",
    "DelegationSlot",
    "Delegator",
    "delegation_tools",
    "recheck_delegate",
]

DELEGATE_TOOLS = frozenset({"delegate_to_worker", "spawn_task", "spawn_subagents"})
MAX_TASK_CHARS = 20_000
MAX_OUTPUT_CHARS = 8_000  # of one child's answer, in the tool result


class DelegationError(ValueError):
    """A delegation the tool refuses; the message is fed back to the model."""


ChildState = Literal["completed", "failed", "running", "waiting", "approval_required", "duplicate"]


@dataclass(frozen=True, slots=True)
class DelegationRequest:
    tool: str
    worker_id: str | None  # None: the calling worker (spawn_task, spawn_subagents)
    tasks: tuple[str, ...]
    request_type: str | None = None
    wait: bool = True  # wait (bounded) for the children's answers


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    worker_id: str
    run_id: str
    state: ChildState
    output: str = ""
    error: str = ""


class Delegator(Protocol):
    async def delegate(self, ctx: ToolContext, request: DelegationRequest) -> list[ChildOutcome]: ...


class DelegationSlot:
    """What the tools delegate through; the composition sets it once the router exists."""

    def __init__(self) -> None:
        self.runner: Delegator | None = None

    async def run(self, ctx: ToolContext, request: DelegationRequest) -> list[ChildOutcome]:
        recheck_delegate(ctx)
        if self.runner is None:
            raise DelegationError("delegation is not available on this runtime")
        for task in request.tasks:
            if not task.strip():
                raise DelegationError("a task is empty: say what the other run should do")
            if len(task) > MAX_TASK_CHARS:
                raise DelegationError(f"a task has {len(task)} characters; at most {MAX_TASK_CHARS}")
        return await self.runner.delegate(ctx, request)


def recheck_delegate(ctx: ToolContext) -> None:
    """The delegate effect checked in the handler, as the tool's own effect (seed §3.3): the posture,
    the tool policy and the trust level, whatever `tool_effect_overrides` made of the tool."""
    spec = replace(ctx.spec, effect=Effect.DELEGATE)
    denied = posture_denial(ctx.scope, spec) or policy_denial(ctx.scope, spec)
    if denied is not None:
        raise DelegationError(f"this run may not delegate: {denied.reason}")


def delegation_tools(slot: DelegationSlot) -> list[FunctionTool]:
    @function_tool(effect=Effect.DELEGATE, risk_level=RiskLevel.HIGH)
    async def delegate_to_worker(
        ctx: ToolContext, worker_id: str, task: str, request_type: str | None = None
    ) -> ToolResult:
        """Ask another worker (a colleague in your organisation) to do a task, and wait for their answer.
        It runs as their own task, under their duties and rules; if it takes long you get its run id.

        Args:
            worker_id: The colleague's worker id.
            task: What they should do, with everything they need to know.
            request_type: The kind of request their duties accept from you (e.g. data_request), if any.
        """
        request = DelegationRequest("delegate_to_worker", worker_id.strip(), (task,), request_type or None)
        return _answer(await slot.run(ctx, request))

    @function_tool(effect=Effect.DELEGATE, risk_level=RiskLevel.HIGH)
    async def spawn_task(ctx: ToolContext, task: str) -> ToolResult:
        """Start a separate task of your own that runs in the background; you get its run id, not its
        result (its result is in that run's record).

        Args:
            task: What the task should do, with everything it needs to know.
        """
        return _answer(await slot.run(ctx, DelegationRequest("spawn_task", None, (task,), wait=False)))

    @function_tool(effect=Effect.DELEGATE, risk_level=RiskLevel.HIGH)
    async def spawn_subagents(ctx: ToolContext, tasks: list[str]) -> ToolResult:
        """Run several independent sub-tasks of your own in parallel and wait for their answers.

        Args:
            tasks: One self-contained instruction per sub-task.
        """
        if not tasks:
            raise DelegationError("tasks is empty: give one instruction per sub-task")
        return _answer(await slot.run(ctx, DelegationRequest("spawn_subagents", None, tuple(tasks))))

    return [delegate_to_worker, spawn_task, spawn_subagents]


def _answer(outcomes: Sequence[ChildOutcome]) -> ToolResult:
    lines = [_line(o) for o in outcomes]
    data = [{"worker_id": o.worker_id, "run_id": o.run_id, "state": o.state} for o in outcomes]
    return ToolResult("\n\n".join(lines), data=data)


def _line(outcome: ChildOutcome) -> str:
    who = f"{outcome.worker_id}, run {outcome.run_id}"
    match outcome.state:
        case "completed":
            output = outcome.output.strip() or "(no answer)"
            if len(output) > MAX_OUTPUT_CHARS:
                output = output[:MAX_OUTPUT_CHARS] + " [cut]"
            return f"[{who}] completed:\n{output}"
        case "running":
            return f"[{who}] started and runs on its own; its result will be in its run record. Do not start it again."
        case "waiting" | "approval_required":
            return f"[{who}] waits ({outcome.state}): {outcome.error or outcome.output or 'for a person'}"
        case "duplicate":
            return f"[{who}] was already started by this call earlier: {outcome.error}"
        case "failed":
            return f"[{who}] failed: {outcome.error or 'no reason given'}"
