"""What a duty run's record says about its contract and its result's way out: the contract checks
(output schema, audit evidence, quality criteria, SLA), each delivery of the result, and each
escalation. Values only; `TaskLifecycle` writes them (`record_checks`, `record_deliveries`,
`record_escalations`), and `genworker.autonomy.duties` decides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import ConfigDict

__all__ = [
    "CheckItem",
    "CheckKind",
    "CheckVerdict",
    "ContractCheck",
    "DeliveryRecord",
    "DeliveryState",
    "EscalationRecord",
    "EscalationState",
]

_STRICT: ConfigDict = ConfigDict(extra="forbid")

CheckKind = Literal["output_schema", "audit", "quality", "escalation", "sla"]
CheckVerdict = Literal["passed", "repaired", "failed", "inconclusive", "breached"]
DeliveryState = Literal[
    "pending",  # planned when the run completed; not yet handed to the outbox
    "sending",
    "sent",
    "retrying",
    "given_up",
    "failed",
    "outcome_unknown",
    "held",  # not sent: the run's governance posture (proposal_only, degraded) does not let it act
    "skipped",  # not sent: the run did not complete
]
EscalationState = Literal["sending", "sent", "retrying", "given_up", "failed", "outcome_unknown", "task_created"]


def _aware(value: datetime, name: str) -> None:
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value.isoformat()}")


@dataclass(frozen=True, slots=True)
class CheckItem:
    """One criterion, evidence item or condition of a check: met (True), not (False), unknown (None)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    name: str
    ok: bool | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class ContractCheck:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    check: CheckKind
    verdict: CheckVerdict
    at: datetime
    detail: str = ""
    items: tuple[CheckItem, ...] = ()

    def __post_init__(self) -> None:
        _aware(self.at, "at")


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One destination of the run's result, sent through the outbox under `key` (once per run)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    key: str
    to: str  # the destination as the duty declares it: "chat slack:C0123", "email a@x, b@y"
    format: str
    state: DeliveryState
    updated_at: datetime
    outbox_id: str | None = None
    delivered_to: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        _aware(self.updated_at, "updated_at")


@dataclass(frozen=True, slots=True)
class EscalationRecord:
    """One escalation: why, to whom, and how it went (a message to a person through the outbox, or a
    task for a worker of the same tenant: `ref` is the outbox entry or that worker's run)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    key: str
    condition: str
    target: str
    kind: Literal["person", "worker"]
    state: EscalationState
    updated_at: datetime
    ref: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        _aware(self.updated_at, "updated_at")
