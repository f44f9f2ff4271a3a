"""The confirmation record, its timeout policy, errors and the event topics it is announced under."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import timedelta
from typing import Any, Final, Literal, Protocol

__all__ = [
    "CONFIRMATION_CLOSED",
    "CONFIRMATION_DECIDED",
    "CONFIRMATION_ESCALATED",
    "CONFIRMATION_REMINDED",
    "CONFIRMATION_REQUESTED",
    "LANGGRAPH_INTERRUPT",
    "POLICY_TIMEOUT",
    "Confirmation",
    "ConfirmationDecided",
    "ConfirmationError",
    "ConfirmationNotFound",
    "ConfirmationNotifier",
    "ConfirmationPolicy",
    "ReminderKind",
    "Status",
    "summary_line",
]

SCHEMA_VERSION = 3  # 2 added reminders, routing fields and tool confirmations, 3 preferred_skill_ids; all read
_READABLE: Final = frozenset({1, 2, SCHEMA_VERSION})
Status = Literal["pending", "approved", "rejected"]
TimeoutAction = Literal["remind", "escalate", "remind_then_escalate", "close"]
ReminderKind = Literal["remind", "escalate", "close"]
CONFIRMATION_REQUESTED: Final = "task.confirmation_requested"
CONFIRMATION_REMINDED: Final = "task.confirmation_reminded"
CONFIRMATION_ESCALATED: Final = "task.confirmation_escalated"
CONFIRMATION_DECIDED: Final = "task.confirmation_decided"
CONFIRMATION_CLOSED: Final = "task.confirmation_closed"
POLICY_TIMEOUT: Final = "policy:timeout"
LANGGRAPH_INTERRUPT: Final = "langgraph.interrupt"  # the inbox item of a graph interrupt (seed §3.4)


class ConfirmationError(Exception):
    """Base of every confirmation error (alone: a confirmation file that cannot be read)."""


class ConfirmationNotFound(ConfirmationError, LookupError):
    """No such confirmation for this worker."""


class ConfirmationDecided(ConfirmationError, ValueError):
    """The confirmation was already approved or rejected."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    confirmation_id: str
    tenant_id: str
    worker_id: str
    run_id: str
    task_id: str
    thread_id: str
    text: str
    skill_id: str | None
    gate_ref: str | None
    reasons: tuple[str, ...]
    created_at: str
    status: Status = "pending"
    decided_at: str | None = None
    decided_by: str | None = None
    reminders: int = 0
    last_reminded_at: str | None = None
    escalated_at: str | None = None
    # how the gated request arrived: the approved run is routed the same way, so the governance
    # stage reaches the same gate and accepts the approval for it
    source_type: str = "task"
    source_id: str | None = None
    duty_id: str | None = None
    trigger_id: str | None = None
    goal_id: str | None = None
    preferred_skill_ids: tuple[str, ...] = ()  # the request's own (the duty's and goal's are re-added)
    # "gate": the governance stage gated the task; "tool": a tool call inside a run waits — `tool_call`
    # is {"id", "name", "arguments"}, run under `posture` once approved; "interrupt": a LangGraph graph
    # asked a person (`tool_call` holds its value): approving or rejecting continues the graph
    # "review": a supervisor asked a person to look at a run (docs/supervisor.md): deciding it only
    # records the decision, nothing runs again; "pause": a supervisor paused a ReAct run between turns:
    # approving resumes it from `checkpoint`, rejecting cancels it
    kind: Literal["gate", "tool", "interrupt", "review", "pause"] = "gate"
    tool_call: dict[str, Any] | None = None
    posture: str = "normal"
    approval_ref: str | None = None  # the gate approval the waiting run carried, if any
    evidence: dict[str, Any] | None = None  # the request's confidence / sources / actions (governance.evidence)
    # a ReAct run's conversation up to the waiting call: approval appends the call's result and continues
    checkpoint: list[dict[str, Any]] = field(default_factory=list)
    # a plan's or graph's run waits ({"engine", "run_id", ...}): the decision continues its state
    continuation: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION


_FIELDS: Final = frozenset(f.name for f in fields(Confirmation))


@dataclass(frozen=True, slots=True)
class ConfirmationPolicy:
    """What happens to an unanswered confirmation; Steward's `brief_window_hours` (reminder cadence),
    `waiting_default_timeout_hours` (the timeout) and `waiting_timeout_action`:

    - ``remind_then_escalate``: remind every `remind_every`; at the timeout escalate once (P0); then
      remind every `escalate_after`;
    - ``remind``: remind every `remind_every`, never escalate;
    - ``escalate``: nothing before the timeout; then as after an escalation above;
    - ``close``: remind every `remind_every`; at the timeout reject it (by ``policy:timeout``),
      cancel the waiting run and announce that it was closed.
    """

    remind_every: timedelta = timedelta(hours=4)
    escalate_after: timedelta = timedelta(hours=24)
    action: TimeoutAction = "remind_then_escalate"

    def __post_init__(self) -> None:
        if self.remind_every <= timedelta(0) or self.escalate_after <= timedelta(0):
            raise ValueError("remind_every and escalate_after must be positive")
        if self.action not in ("remind", "escalate", "remind_then_escalate", "close"):
            raise ValueError(f"unknown timeout action {self.action!r}")

    @classmethod
    def of(cls, brief_window_hours: float, waiting_default_timeout_hours: float, action: str) -> ConfirmationPolicy:
        """From the values of a worker's effective Steward policy."""
        return cls(
            timedelta(hours=brief_window_hours),
            timedelta(hours=waiting_default_timeout_hours),
            action,  # type: ignore[arg-type]  # validated in __post_init__
        )


class ConfirmationNotifier(Protocol):
    async def requested(self, confirmation: Confirmation) -> None: ...

    async def reminded(self, confirmation: Confirmation, *, escalated: bool) -> None: ...

    async def decided(self, confirmation: Confirmation) -> None: ...

    async def closed(self, confirmation: Confirmation) -> None: ...


def summary_line(confirmation: Confirmation) -> str:
    text = " ".join(confirmation.text.split())
    return text if len(text) <= 120 else text[:117] + "..."
