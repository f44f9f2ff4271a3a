"""The Conflict Arbiter's values (Steward): what a plan changes (`EffectRecord`), the plan's state
machine (`PlanState`), and a conflict between two plans (`ConflictCase`).

Plan states, as Steward's seed draws them:

    NEW -> PLANNED -> GATED -> RUNNING -> (WAITING | CONFLICTED | SUCCEEDED | FAILED | ROLLED_BACK)

RUNNING | GATED | PLANNED -> CONFLICTED when a conflict is found; CONFLICTED -> GATED once it is
resolved (merge, serialize, replan, or a person's decision); a conflict a person drops ends the plan
FAILED. WAITING -> RUNNING | GATED as in docs/waiting.md. Files carry `schema_version`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Literal

from genworker.autonomy.conflicts.errors import ConflictFileError, IllegalPlanTransition
from genworker.workspace.models.effects import Reversibility
from genworker.workspace.models.steward import Resolution

__all__ = [
    "PLAN_TRANSITIONS",
    "SCHEMA_VERSION",
    "CaseStatus",
    "ConflictCase",
    "ConflictType",
    "EffectRecord",
    "PlanRecord",
    "PlanState",
    "Resolution",
    "ResourceState",
    "Reversibility",
    "Transition",
    "case_from_json",
    "effect_id",
    "plan_from_json",
]

SCHEMA_VERSION: Final = 1
ConflictType = Literal["resource", "semantic"]
CaseStatus = Literal["open", "resolved", "dropped"]


class PlanState(StrEnum):
    NEW = "new"
    PLANNED = "planned"
    GATED = "gated"
    RUNNING = "running"
    WAITING = "waiting"
    CONFLICTED = "conflicted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"

    @property
    def terminal(self) -> bool:
        return self in (PlanState.SUCCEEDED, PlanState.FAILED, PlanState.ROLLED_BACK)


_ENDS = frozenset({PlanState.SUCCEEDED, PlanState.FAILED, PlanState.ROLLED_BACK})
PLAN_TRANSITIONS: Mapping[PlanState, frozenset[PlanState]] = MappingProxyType(
    {
        PlanState.NEW: frozenset({PlanState.PLANNED, PlanState.FAILED}),
        PlanState.PLANNED: frozenset({PlanState.GATED, PlanState.CONFLICTED, PlanState.FAILED}),
        PlanState.GATED: frozenset({PlanState.RUNNING, PlanState.CONFLICTED, PlanState.FAILED}),
        PlanState.RUNNING: _ENDS | {PlanState.WAITING, PlanState.CONFLICTED},
        PlanState.WAITING: frozenset({PlanState.RUNNING, PlanState.GATED, PlanState.FAILED}),
        PlanState.CONFLICTED: frozenset({PlanState.GATED, PlanState.FAILED}),
        **{state: frozenset() for state in _ENDS},
    }
)


def effect_id(plan_id: str, resource_key: str, operation: str) -> str:
    digest = hashlib.sha256(f"{plan_id}\n{resource_key}\n{operation}".encode()).hexdigest()
    return f"ef_{digest[:16]}"


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """Steward's PlanEffect: one resource a plan changes, how, and the version it read."""

    plan_id: str
    tenant_id: str
    worker_id: str
    resource_key: str  # github:issue:42, mail:thread:<id>, file:<path> ...
    operation: str  # set_status:closed, comment ...
    expected_version: str | None = None  # the ETag / updated_at the plan read; None: not known
    reversibility: Reversibility = "reversible"
    committed: bool = False  # the plan has made this change (serialized plans behind it may go on)

    @property
    def effect_id(self) -> str:
        return effect_id(self.plan_id, self.resource_key, self.operation)

    @property
    def irreversible(self) -> bool:
        return self.reversibility == "irreversible"

    def as_json(self) -> dict[str, Any]:
        return {"effect_id": self.effect_id, **asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EffectRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True)
class Transition:
    source: PlanState
    target: PlanState
    at: datetime
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"from": self.source.value, "to": self.target.value, "at": self.at.isoformat(), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """A plan as the arbiter tracks it: a run (plan id = run id) or a plan declared over the API."""

    plan_id: str
    tenant_id: str
    worker_id: str
    state: PlanState
    created_at: datetime
    effects: tuple[EffectRecord, ...] = ()
    history: tuple[Transition, ...] = ()
    run_bound: bool = True  # its liveness is its run's; False: declared, it ends when told (`finish`) or expires
    ttl_s: int | None = None  # declared: how long it lives without a commit
    expires_at: datetime | None = None  # declared: when it expires unless it commits before (each commit renews)
    schema_version: int = SCHEMA_VERSION

    def expired(self, now: datetime) -> bool:
        return not self.state.terminal and self.expires_at is not None and self.expires_at <= now

    def moved(self, target: PlanState, at: datetime, reason: str = "") -> PlanRecord:
        if target not in PLAN_TRANSITIONS[self.state]:
            raise IllegalPlanTransition(f"plan {self.plan_id}: illegal transition from {self.state} to {target}")
        step = Transition(self.state, target, at, reason)
        return replace(self, state=target, history=(*self.history, step))

    def as_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "plan_id": self.plan_id,
            "tenant_id": self.tenant_id,
            "worker_id": self.worker_id,
            "state": self.state.value,
            "created_at": self.created_at.isoformat(),
            "run_bound": self.run_bound,
            "ttl_s": self.ttl_s,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "effects": [e.as_json() for e in self.effects],
            "history": [t.as_json() for t in self.history],
        }


def plan_from_json(data: Mapping[str, Any], where: str) -> PlanRecord:
    _check_version(data, where)
    try:
        return PlanRecord(
            plan_id=str(data["plan_id"]),
            tenant_id=str(data["tenant_id"]),
            worker_id=str(data["worker_id"]),
            state=PlanState(data["state"]),
            created_at=datetime.fromisoformat(data["created_at"]),
            run_bound=bool(data.get("run_bound", True)),
            ttl_s=data.get("ttl_s"),
            expires_at=datetime.fromisoformat(data["expires_at"]) if data.get("expires_at") else None,
            effects=tuple(EffectRecord.from_json(e) for e in data.get("effects", ())),
            history=tuple(
                Transition(PlanState(t["from"]), PlanState(t["to"]), datetime.fromisoformat(t["at"]), t["reason"])
                for t in data.get("history", ())
            ),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise ConflictFileError(f"{where}: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, slots=True)
class ConflictCase:
    """Steward's ConflictCase: plan B (found later) against plan A on one resource (or, semantic,
    between two brief items)."""

    conflict_id: str
    tenant_id: str
    plan_a_id: str
    plan_b_id: str
    conflict_type: ConflictType
    resolution: Resolution
    status: CaseStatus
    created_at: datetime
    resource_key: str = ""
    worker_a_id: str = ""
    worker_b_id: str = ""
    operation_a: str = ""
    operation_b: str = ""
    irreversible: bool = False
    detected_at: Literal["plan", "commit", "brief"] = "plan"
    detail: str = ""  # why, and what the resolution means for each plan
    resolved_by: Literal["system", "user"] | None = None
    resolved_at: datetime | None = None
    decision: str | None = None  # a person's: proceed | drop (and who)
    decided_by: str | None = None
    schema_version: int = SCHEMA_VERSION

    def involves(self, plan_id: str) -> bool:
        return plan_id in (self.plan_a_id, self.plan_b_id)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data["resolved_at"] = self.resolved_at.isoformat() if self.resolved_at else None
        return data


_CASE_FIELDS: Final = frozenset(f.name for f in fields(ConflictCase))


def case_from_json(data: Mapping[str, Any], where: str) -> ConflictCase:
    _check_version(data, where)
    unknown = sorted(set(data) - _CASE_FIELDS)
    if unknown:
        raise ConflictFileError(f"{where}: unknown fields {unknown}")
    try:
        values = dict(data)
        values["created_at"] = datetime.fromisoformat(values["created_at"])
        if values.get("resolved_at"):
            values["resolved_at"] = datetime.fromisoformat(values["resolved_at"])
        return ConflictCase(**values)
    except (KeyError, ValueError, TypeError) as exc:
        raise ConflictFileError(f"{where}: {type(exc).__name__}: {exc}") from None


def _check_version(data: Mapping[str, Any], where: str) -> None:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ConflictFileError(
            f"{where}: unsupported schema_version {data.get('schema_version')!r}; this build reads {SCHEMA_VERSION}"
        )


@dataclass(frozen=True, slots=True)
class ResourceState:
    """What the ledger knows of one resource: the last version committed through the arbiter, by
    which plan and operation, and the plans that claim it now."""

    resource_key: str
    version: str | None = None
    committed_by: str | None = None
    committed_operation: str | None = None
    claims: Mapping[str, EffectRecord] = field(default_factory=lambda: MappingProxyType({}))
