"""Learning from feedback (Steward): a person's feedback on a decision (`FeedbackEvent`), the learned
policy as versions of small changes (`PolicyVersion`), and the worker's learning state.

A learned policy is the Steward gate plus the changes of every *applied* version, oldest first: a
`gate` change says an action needs a person's confirmation (`confirm`) or may run without one
(`auto`); a `priority` change moves the priority of items alike (one `similarity_key`) up or down a
level; a `budget` change sets the worker's interruption budget per day.
A version starts in `shadow` (its decisions are only logged as "would have ..."), becomes `active`
once a person applies it after the shadow period, and `rolled_back` in one command. Files carry
`schema_version`; unknown versions are rejected.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, Final, Literal

__all__ = [
    "BUDGET",
    "NEGATIVE",
    "SCHEMA_VERSION",
    "ChangeKind",
    "FeedbackEvent",
    "FeedbackSource",
    "FeedbackType",
    "Freeze",
    "LearnedGate",
    "LearningFileError",
    "LearningState",
    "PolicyChange",
    "PolicyVersion",
    "VersionStatus",
]

SCHEMA_VERSION: Final = 1
FeedbackType = Literal["approve", "reject", "edit_priority", "snooze", "accept_install", "decline_install"]
FeedbackSource = Literal["api", "im", "dashboard", "confirmation", "undo"]
NEGATIVE: Final = frozenset({"reject"})
LearnedGate = Literal["confirm", "auto"]
VersionStatus = Literal["shadow", "active", "rolled_back", "discarded"]
ChangeKind = Literal["gate", "priority", "budget"]
BUDGET: Final = "interruption_budget_per_day"  # the subject of a budget change


class LearningFileError(ValueError):
    """A learning file cannot be read (names it)."""


@dataclass(frozen=True, slots=True)
class FeedbackEvent:
    """Steward's FeedbackEvent, with what it is about: the actions and gate result of the decision."""

    feedback_id: str
    tenant_id: str
    worker_id: str
    feedback_type: FeedbackType
    created_at: datetime
    actions: tuple[str, ...] = ()  # the decision's actions (requested_actions, or "{source}_task")
    gate_result: str | None = None  # auto | brief | confirm | blocked: what the decision was
    decision_id: str | None = None  # the decision's policy snapshot
    plan_id: str | None = None  # the run
    old_value: str | None = None
    new_value: str | None = None
    note: str | None = None
    by: str = ""
    source: FeedbackSource = "api"
    irreversible: bool = False  # the decision's action is irreversible or always needs a person
    features: dict[str, str] = field(default_factory=dict)  # what makes items alike: source, intent ...
    schema_version: int = SCHEMA_VERSION

    def similarity_key(self, names: tuple[str, ...]) -> str:
        return similarity_key(self.features, names)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data["actions"] = list(self.actions)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> FeedbackEvent:
        _check(data, where)
        try:
            values = dict(data)
            values["created_at"] = datetime.fromisoformat(values["created_at"])
            values["actions"] = tuple(values.get("actions", ()))
            values["features"] = dict(values.get("features") or {})
            return cls(**values)
        except (KeyError, TypeError, ValueError) as exc:
            raise LearningFileError(f"{where}: {type(exc).__name__}: {exc}") from None


def similarity_key(features: dict[str, str], names: tuple[str, ...]) -> str:
    """`source=duty|intent=label_issue|...`: the features `names` picks, in that order."""
    return "|".join(f"{name}={features.get(name) or '-'}" for name in names)


@dataclass(frozen=True, slots=True)
class PolicyChange:
    action: str  # gate: the action; priority: the similarity key; budget: BUDGET
    gate: LearnedGate | None = None
    reason: str = ""
    kind: ChangeKind = "gate"
    value: int | None = None  # priority: levels up (+) or down (-); budget: interruptions a day

    def describe(self) -> str:
        match self.kind:
            case "gate":
                return f"{self.action} -> {self.gate}"
            case "priority":
                return f"priority of [{self.action}] {self.value or 0:+d} level(s)"
            case "budget":
                return f"interruption budget -> {self.value} a day"


@dataclass(frozen=True, slots=True)
class PolicyVersion:
    version: int
    changes: tuple[PolicyChange, ...]
    status: VersionStatus
    created_at: datetime
    shadow_until: datetime
    evidence: tuple[str, ...] = ()  # the feedback ids it was learned from
    suggestion_id: str | None = None  # the suggestion that proposes applying it
    applied_at: datetime | None = None
    applied_by: str | None = None
    ended_at: datetime | None = None  # rolled back or discarded
    ended_by: str | None = None

    def touches(self, subject: str, kind: ChangeKind = "gate") -> bool:
        return any(c.action == subject and c.kind == kind for c in self.changes)

    @property
    def kind(self) -> ChangeKind:
        return self.changes[0].kind if self.changes else "gate"

    def describe(self) -> str:
        return ", ".join(c.describe() for c in self.changes)


@dataclass(frozen=True, slots=True)
class Freeze:
    at: datetime
    reason: str


@dataclass(frozen=True, slots=True)
class LearningState:
    """`runtime/learning/policy.json` of one worker."""

    versions: tuple[PolicyVersion, ...] = ()
    frozen: Freeze | None = None
    unfrozen_at: datetime | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def active(self) -> tuple[PolicyVersion, ...]:
        return tuple(v for v in self.versions if v.status == "active")

    @property
    def shadows(self) -> tuple[PolicyVersion, ...]:
        return tuple(v for v in self.versions if v.status == "shadow")

    @property
    def live_version(self) -> int:
        """The version that decides: the newest applied one still active (0: Steward's gate alone)."""
        active = self.active
        return active[-1].version if active else 0

    def _changes(self, kind: ChangeKind, extra: PolicyVersion | None) -> list[PolicyChange]:
        """The changes of `kind` of the active versions (oldest first), then `extra`'s."""
        versions = (*self.active, *((extra,) if extra is not None else ()))
        return [c for v in versions for c in v.changes if c.kind == kind]

    def rules(self, extra: PolicyVersion | None = None) -> dict[str, LearnedGate]:
        """action -> learned gate, from the active versions (oldest first), then `extra`."""
        return {c.action: c.gate for c in self._changes("gate", extra) if c.gate is not None}

    def priorities(self, extra: PolicyVersion | None = None) -> dict[str, int]:
        """similarity key -> levels up (+) or down (-)."""
        return {c.action: c.value or 0 for c in self._changes("priority", extra)}

    def budget(self, extra: PolicyVersion | None = None) -> int | None:
        """The learned interruption budget per day (None: the policy's)."""
        found = [c.value for c in self._changes("budget", extra) if c.value is not None]
        return found[-1] if found else None

    def decides(self, kind: ChangeKind) -> int:
        """The version that decides for `kind`: the newest active one with such a change (0: none)."""
        found = [v.version for v in self.active if v.kind == kind]
        return found[-1] if found else 0

    def version(self, number: int) -> PolicyVersion | None:
        return next((v for v in self.versions if v.version == number), None)

    def with_version(self, version: PolicyVersion) -> LearningState:
        others = tuple(v for v in self.versions if v.version != version.version)
        return replace(self, versions=tuple(sorted((*others, version), key=lambda v: v.version)))

    def as_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "frozen": {"at": self.frozen.at.isoformat(), "reason": self.frozen.reason} if self.frozen else None,
            "unfrozen_at": self.unfrozen_at.isoformat() if self.unfrozen_at else None,
            "versions": [_version_json(v) for v in self.versions],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> LearningState:
        _check(data, where)
        try:
            frozen = data.get("frozen")
            return cls(
                versions=tuple(_version(v) for v in data.get("versions", ())),
                frozen=Freeze(datetime.fromisoformat(frozen["at"]), frozen["reason"]) if frozen else None,
                unfrozen_at=_when(data.get("unfrozen_at")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise LearningFileError(f"{where}: {type(exc).__name__}: {exc}") from None


def _check(data: dict[str, Any], where: str) -> None:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise LearningFileError(
            f"{where}: unsupported schema_version {data.get('schema_version')!r}; this build reads {SCHEMA_VERSION}"
        )


def _when(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _version_json(v: PolicyVersion) -> dict[str, Any]:
    data = asdict(v)
    for key in ("created_at", "shadow_until", "applied_at", "ended_at"):
        data[key] = getattr(v, key).isoformat() if getattr(v, key) else None
    data["changes"] = [asdict(c) for c in v.changes]
    data["evidence"] = list(v.evidence)
    return data


def _version(data: dict[str, Any]) -> PolicyVersion:
    return PolicyVersion(
        version=int(data["version"]),
        changes=tuple(PolicyChange(**c) for c in data["changes"]),
        status=data["status"],
        created_at=datetime.fromisoformat(data["created_at"]),
        shadow_until=datetime.fromisoformat(data["shadow_until"]),
        evidence=tuple(data.get("evidence", ())),
        suggestion_id=data.get("suggestion_id"),
        applied_at=_when(data.get("applied_at")),
        applied_by=data.get("applied_by"),
        ended_at=_when(data.get("ended_at")),
        ended_by=data.get("ended_by"),
    )
