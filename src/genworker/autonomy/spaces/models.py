"""The Steward entities of the context-space layer: `ContextEvent` (one sensed fact, immutable),
`ContextSpace` (facts gathered around one project, goal or commitment) and `TaskCandidate` (what a
space whose evidence reached the threshold hands to the task path).

They are persisted (the event log, the space files), so they are pydantic models at that edge,
frozen, with a `schema_version` that must be known. Field names and meanings are the seed's; the
extra fields say why a space is where it is (its evidence, its changes, its review state).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from genworker.autonomy.records import VersionedRecord

__all__ = [
    "SCHEMA_VERSION",
    "Change",
    "ChangeKind",
    "ContextEvent",
    "ContextSpace",
    "EvidenceRef",
    "FocusType",
    "Hints",
    "PinReason",
    "Priority",
    "Review",
    "RiskLevel",
    "SpaceState",
    "TaskCandidate",
]

SCHEMA_VERSION: Final = VersionedRecord.SCHEMA_VERSION
SUMMARY_CHARS: Final = 240

Priority = Literal["P0", "P1", "P2", "P3"]
RiskLevel = Literal["low", "medium", "high"]
FocusType = Literal["project", "goal", "commitment"]
PinReason = Literal["deadline", "open_commitment", "waiting_dependency", "manual"]
# confirmed: a person or a confident route made it; pending: a low-confidence NEW a person has to
# confirm or re-file; merged: re-filed into `merged_into` (kept, never deleted)
Review = Literal["confirmed", "pending", "merged"]
# merged: automatically, as a duplicate of `other_space`; merge_reverted: a re-filing or merge undone
ChangeKind = Literal[
    "created", "resurrected", "resurrection_reverted", "confirmed", "refiled", "absorbed", "pinned", "unpinned",
    "merged", "merge_reverted",
]  # fmt: skip


class SpaceState(StrEnum):
    ACTIVE = "active"
    DORMANT = "dormant"
    PARKED = "parked"
    ARCHIVED = "archived"


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Hints(_Value):
    """What a fact says about the work beyond its text, read from well-known payload fields."""

    due_at: AwareDatetime | None = None
    starts_at: AwareDatetime | None = None  # a meeting's start: a time anchor for the facts around it
    commitment: Literal["open", "done"] | None = None
    waiting_on: str | None = None  # an outside reply or system result the work depends on
    waiting_resolved: bool = False
    priority: Priority | None = None
    intent: str | None = None  # reply | follow_up | approve | schedule | investigate ...
    risk: RiskLevel | None = None


class ContextEvent(VersionedRecord):
    event_id: str
    tenant_id: str
    worker_id: str
    source: str  # github | email | chat | calendar | screen | local | webhook | goal ...
    source_ref: str  # message id, issue id, file path ...
    occurred_at: AwareDatetime
    actor: str = ""
    summary: str
    confidence: float = Field(ge=0.0, le=1.0)  # how sure the perception is
    raw_ref: str  # where the original is: inbox:{item_id}
    entities: tuple[str, ...] = ()  # kind:value, e.g. person:alice, repo:acme/api, issue:acme/api#42
    anchors: tuple[str, ...] = ()  # strong anchors: issue:…, thread:…, goal:…, calendar:…
    actionable: bool = False  # the heartbeat would have made a task of it on its own
    hints: Hints = Hints()
    recorded_at: AwareDatetime


class EvidenceRef(_Value):
    """One event as its space keeps it: enough to read and score without the log."""

    event_id: str
    source: str
    at: AwareDatetime
    confidence: float
    actionable: bool = False
    actor: str = ""
    summary: str = ""
    priority: Priority | None = None
    risk: RiskLevel | None = None
    intent: str | None = None
    starts_at: AwareDatetime | None = None
    route: str = ""  # why it is in this space: "anchor issue:…", "model 0.91: …", "new", "resurrected …"


class Change(_Value):
    """A recorded change of a space that a person may want to see or undo."""

    at: AwareDatetime
    kind: ChangeKind
    detail: str = ""
    event_id: str | None = None
    from_state: SpaceState | None = None
    other_space: str | None = None
    similarity: float | None = None
    previous_active_at: AwareDatetime | None = None  # what a reverted resurrection restores


class TaskCandidate(_Value):
    task_id: str
    derived_from: str  # the space id
    title: str
    intent: str
    priority: Priority
    risk_level: RiskLevel
    impact_score: int = Field(ge=0, le=100)
    urgency_score: int = Field(ge=0, le=100)
    blocking_on: str | None = None
    score: float  # the evidence score that reached the threshold
    evidence_events: tuple[str, ...]
    sources: tuple[str, ...]  # the independent sources behind it
    created_at: AwareDatetime
    run_id: str | None = None  # the run the task path started for it


class ContextSpace(VersionedRecord):
    space_id: str
    tenant_id: str
    worker_id: str
    title: str  # the focus, in a line
    focus_type: FocusType = "project"
    focus_ref: str = ""  # the anchor it is about: repo/issue, goal id ...
    entity_set: tuple[str, ...] = ()
    anchors: tuple[str, ...] = ()
    evidence: tuple[EvidenceRef, ...] = ()
    space_score: float = Field(default=0.0, ge=0.0, le=1.0)
    state: SpaceState = SpaceState.ACTIVE
    is_pinned: bool = False
    pin_reason: PinReason | None = None
    manual_pin: bool | None = None  # a person's pin (True) or unpin (False) beats the automatic one
    due_at: AwareDatetime | None = None
    open_commitments_count: int = Field(default=0, ge=0)
    waiting_on: str | None = None
    last_reactivated_at: AwareDatetime | None = None
    created_at: AwareDatetime
    last_active_at: AwareDatetime
    review: Review = "confirmed"
    route_confidence: float | None = None  # of the route that created a pending space
    route_reason: str = ""
    suggested_space: str | None = None  # the space the model leaned to, for a pending one
    merged_into: str | None = None
    candidates: tuple[TaskCandidate, ...] = ()
    changes: tuple[Change, ...] = ()

    @property
    def evidence_events(self) -> tuple[str, ...]:
        return tuple(e.event_id for e in self.evidence)

    @property
    def label(self) -> str:
        return f"{self.space_id} ({self.title})"

    def has_event(self, event_id: str) -> bool:
        return any(e.event_id == event_id for e in self.evidence)
