"""What planning and LangGraph runs keep in their run record: the plan and each node's state, or the
graph's thread and last checkpoint. Values only (persisted with the RunRecord); the engines change
them, `TaskLifecycle.record_plan` / `record_graph` write them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict

__all__ = ["NODE_DONE", "GraphRecord", "NodeState", "PlanNode", "PlanRecord", "PlanStatus"]

_STRICT: ConfigDict = ConfigDict(extra="forbid")

NodeState = Literal["pending", "running", "completed", "failed", "skipped", "waiting_approval", "outcome_unknown"]
NODE_DONE: frozenset[str] = frozenset({"completed", "failed", "skipped", "outcome_unknown"})
PlanStatus = Literal["planning", "running", "waiting_approval", "completed", "failed"]


@dataclass(frozen=True, slots=True)
class PlanNode:
    """One sub-step of a plan: a ReAct sub-run on `instruction` with `tools`, after `depends_on`."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    id: str
    instruction: str
    depends_on: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    expected_output: str = ""
    state: NodeState = "pending"
    output: str = ""
    error: str = ""
    revision: int = 1  # the plan revision that made it
    turns: int = 0  # model calls of its sub-run
    # side-effecting tool calls ("tool call_id"), written before each runs: such a node is never run again
    side_effects: tuple[str, ...] = ()
    # waiting_approval: its conversation up to the waiting call, so approval continues it
    checkpoint: tuple[dict[str, Any], ...] = ()
    pending_call: dict[str, Any] | None = None  # waiting_approval: {"id", "name", "arguments"}
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PlanRecord:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    status: PlanStatus
    nodes: tuple[PlanNode, ...] = ()
    revision: int = 1  # +1 per re-plan
    replans: int = 0
    rejected: tuple[str, ...] = ()  # why plans the model proposed were refused
    notes: tuple[str, ...] = ()  # re-plans, resumes
    continued_from: str | None = None  # the run whose plan this run carries on

    def node(self, node_id: str) -> PlanNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)


@dataclass(frozen=True, slots=True)
class GraphRecord:
    """A LangGraph run: the checkpoint thread (the first run of the chain), where it stands."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    thread: str
    status: Literal["running", "interrupted", "completed", "failed"] = "running"
    checkpoint_id: str | None = None
    steps: tuple[str, ...] = ()  # the nodes run in this run, in order
    interrupt: dict[str, Any] | None = None  # interrupted: the value the graph's interrupt() asked with
    continued_from: str | None = None
