"""SupervisorDecision and the supervisor's own state machine. The supervisor's state is kept beside
the run's (in the run's supervision record): it never overwrites the run state."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

__all__ = ["ACTIONS", "Action", "Decision", "SupervisorState", "advance"]

Action = Literal["continue", "comment", "warn", "request_review", "pause", "stop"]
ACTIONS: tuple[Action, ...] = ("continue", "comment", "warn", "request_review", "pause", "stop")


class SupervisorState(StrEnum):
    INACTIVE = "inactive"
    OBSERVING = "observing"
    ATTENTION_REQUIRED = "attention_required"
    PAUSED = "paused"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Decision:
    """What the supervisor decided about one event. `cites` names what it is about: a tool call id,
    `message:<n>` or `output`; `check` is the deterministic check or `model:<concern>`."""

    action: Action
    check: str
    reason: str
    cites: tuple[str, ...] = ()
    budget: bool = False  # a budget was exceeded: a pause or stop ends the run `budget_exceeded`
    policy: str = ""
    extra: dict[str, object] = field(default_factory=dict)


_TARGET: dict[Action, SupervisorState | None] = {
    "continue": None,
    "comment": None,
    "warn": SupervisorState.ATTENTION_REQUIRED,
    "request_review": SupervisorState.ATTENTION_REQUIRED,
    "pause": SupervisorState.PAUSED,
    "stop": SupervisorState.PAUSED,
}
_RANK = {s: i for i, s in enumerate(SupervisorState)}


def advance(state: SupervisorState, action: Action | Literal["start", "resolve"]) -> SupervisorState:
    """The state after `action`: `start` moves inactive to observing; a decision only ever raises the
    state (observing -> attention_required -> paused); `resolve` (a person, or a run that ended with
    nothing to look at) ends it. A resolved supervisor stays resolved."""
    if state is SupervisorState.RESOLVED:
        return state
    if action == "start":
        return SupervisorState.OBSERVING if state is SupervisorState.INACTIVE else state
    if action == "resolve":
        return SupervisorState.RESOLVED
    if state is SupervisorState.INACTIVE:
        raise ValueError("a supervisor decides only once it observes a run")
    target = _TARGET[action]
    return target if target is not None and _RANK[target] > _RANK[state] else state
