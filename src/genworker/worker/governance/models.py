"""The values the governance stage takes and returns: input, decision, manifest fields, outcome.

Blocked and not-yet-approved work carries the fail-safe posture `proposal_only`, so a caller
that forgot to check `action` still cannot act.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

from genworker.tools.base import Effect
from genworker.tools.context import Posture
from genworker.worker.governance.errors import GovernanceInputError
from genworker.workspace.models import DutySpec, Tenant
from genworker.workspace.models.duty import DutyPosture, ExecutionDepth
from genworker.workspace.snapshot import Worker

__all__ = [
    "AUTONOMOUS_SOURCES",
    "CONVERSATIONAL_SOURCES",
    "INTERACTIVE_SOURCES",
    "SOURCE_TYPES",
    "Action",
    "GateResult",
    "GovernanceDecision",
    "GovernanceInput",
    "GovernanceOutcome",
    "ManifestFields",
    "Reason",
    "Reversibility",
    "RiskTier",
    "SourceType",
]

SourceType = Literal[
    "chat", "task", "openai", "duty", "event", "schedule", "sensor", "heartbeat", "goal", "collaboration", "experiment"
]  # collaboration: delegated by another run (delegate_to_worker, spawn_task, spawn_subagents); experiment: a variant
Action = Literal["auto", "gated", "blocked"]
RiskTier = Literal["low", "medium", "high"]
Reversibility = Literal["reversible", "undo_window", "irreversible"]
GateResult = Literal["auto", "brief", "confirm", "blocked"]

SOURCE_TYPES: frozenset[str] = frozenset(get_args(SourceType))
INTERACTIVE_SOURCES: frozenset[str] = frozenset({"chat", "task", "openai"})  # a person is waiting on the answer
CONVERSATIONAL_SOURCES: frozenset[str] = frozenset({"chat", "openai"})
AUTONOMOUS_SOURCES: frozenset[str] = SOURCE_TYPES - INTERACTIVE_SOURCES


class Reason(NamedTuple):
    """One rule that fired: a stable code and a sentence a person can read."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass(frozen=True, slots=True)
class GovernanceInput:
    tenant: Tenant
    worker: Worker
    text: str = ""
    source_type: SourceType = "chat"
    source_id: str | None = None
    duty_id: str | None = None
    trigger_id: str | None = None
    goal_id: str | None = None
    skill_id: str | None = None
    preferred_skill_ids: tuple[str, ...] = ()
    approval_ref: str | None = None  # a confirmation already decided for this task
    requested_effects: frozenset[Effect] | None = None  # None: the caller does not know yet
    requested_actions: tuple[str, ...] = ()  # verbs such as "send", matched against the duty contract
    confidence: float | None = None  # the Policy Gate's inputs for an inferred action
    evidence_sources: tuple[str, ...] = ()  # independent signals that agree on it
    undo_available: bool = False  # the action runs through a working undo window

    def __post_init__(self) -> None:
        if self.source_type not in SOURCE_TYPES:
            raise GovernanceInputError(
                f"source_type {self.source_type!r} is not one of {', '.join(sorted(SOURCE_TYPES))}"
            )
        if self.worker.tenant_id != self.tenant.tenant_id:
            raise GovernanceInputError(
                f"worker {self.worker.worker_id} belongs to tenant {self.worker.tenant_id}, not {self.tenant.tenant_id}"
            )
        if self.requested_effects is not None:
            try:
                effects = frozenset(Effect(e) for e in self.requested_effects)
            except ValueError as exc:
                raise GovernanceInputError(f"requested effect: {exc}; use one of {[e.value for e in Effect]}") from None
            object.__setattr__(self, "requested_effects", effects)  # "external" -> Effect.EXTERNAL
        if self.confidence is not None and not 0.0 <= self.confidence <= 1.0:
            raise GovernanceInputError(f"confidence must be between 0 and 1, got {self.confidence}")
        for name in ("preferred_skill_ids", "requested_actions", "evidence_sources"):
            if not isinstance(getattr(self, name), tuple):
                raise GovernanceInputError(f"{name} must be a tuple")
        if not all(isinstance(s, str) and s.strip() for s in self.evidence_sources):
            raise GovernanceInputError(f"evidence_sources must be non-empty source ids, got {self.evidence_sources!r}")

    @property
    def interactive(self) -> bool:
        return self.source_type in INTERACTIVE_SOURCES

    @property
    def conversational(self) -> bool:
        return self.source_type in CONVERSATIONAL_SOURCES

    @property
    def autonomous(self) -> bool:
        return self.source_type in AUTONOMOUS_SOURCES


@dataclass(frozen=True, slots=True)
class GovernanceDecision:
    action: Action
    posture: Posture
    risk_tier: RiskTier
    reversibility: Reversibility
    reasons: tuple[Reason, ...]
    policy_sources: tuple[str, ...] = ()
    gate_result: GateResult | None = None  # the Policy Gate's output: auto | brief | confirm | blocked
    gate_reasons: tuple[Reason, ...] = ()
    undo_window_s: int | None = None  # set: the gate let it run only with its external calls held this long

    @property
    def runnable(self) -> bool:
        return self.action == "auto"

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def as_dict(self) -> dict[str, Any]:
        """As the policy snapshot records it (`undo_window_s` only when set)."""
        held = {"undo_window_s": self.undo_window_s} if self.undo_window_s is not None else {}
        return {
            "action": self.action,
            "posture": self.posture,
            "risk_tier": self.risk_tier,
            "reversibility": self.reversibility,
            "reasons": [{"code": r.code, "message": r.message} for r in self.reasons],
            "policy_sources": list(self.policy_sources),
            "gate_result": self.gate_result,
            "gate_reasons": [{"code": r.code, "message": r.message} for r in self.gate_reasons],
            **held,
        }


@dataclass(frozen=True, slots=True)
class ManifestFields:
    """What the router copies into its TaskManifest / TaskProvenance (same field names)."""

    source_type: SourceType
    policy_snapshot_ref: str  # worker-relative path of the policy snapshot
    policy_ref: str  # "snapshot:policy:{sha256_12}"
    risk_tier: RiskTier
    source_id: str | None = None
    goal_id: str | None = None
    duty_id: str | None = None
    trigger_id: str | None = None
    execution_depth: ExecutionDepth | None = None  # the bound duty's, for this trigger
    duty_posture: DutyPosture | None = None  # likewise
    process_id: str | None = None
    step_id: str | None = None
    contract_version: str | None = None
    contract_snapshot_ref: str | None = None  # worker-relative path of the contract snapshot
    approval_ref: str | None = None  # set only when an approval admitted the task
    skill_id: str | None = None  # the caller's explicit skill
    skill_hint: str | None = None  # the duty's skill_id, else its skill_hint
    preferred_skill_ids: tuple[str, ...] = ()  # the caller's first, then the duty's, then the goal's

    def as_dict(self) -> dict[str, Any]:
        return {name: _plain(getattr(self, name)) for name in self.__dataclass_fields__}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True, slots=True)
class GovernanceOutcome:
    manifest: ManifestFields
    decision: GovernanceDecision
    duty: DutySpec | None = None  # the bound duty, for its action text and pre_script
    gate_ref: str | None = None  # set when the table gated the task: the policy ref a confirmation must approve

    def as_dict(self) -> dict[str, Any]:
        return {"manifest": self.manifest.as_dict(), "decision": self.decision.as_dict(), "gate_ref": self.gate_ref}
