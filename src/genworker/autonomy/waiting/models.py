"""A WAITING plan: work parked until an external event with its `match_key` arrives, or its wait times out.

States (Steward): WAITING -> GATED (an event matched, or the wait timed out) -> RUNNING -> DONE,
or -> CLOSED (timed out for good) / CANCELLED. A plan file carries `schema_version`; unknown versions are rejected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, Literal, get_args

from genworker.ids import validate_id, validate_match_key
from genworker.workspace.models.base import freeze, thaw

__all__ = [
    "SCHEMA_VERSION",
    "WaitState",
    "WaitingError",
    "WaitingPlan",
    "WaitingPlanNotFound",
    "WaitingSchemaError",
    "WaitingTransitionError",
    "plan_from_json",
    "plan_to_json",
]

SCHEMA_VERSION: Final = 1
WaitState = Literal["waiting", "gated", "running", "done", "closed", "cancelled"]
STATES: Final = frozenset(get_args(WaitState))
ENDED_STATES: Final = frozenset({"done", "cancelled", "closed"})  # nothing moves a plan out of these
GatedBy = Literal["event", "timeout", "manual"]


class WaitingError(Exception):
    """Base of the WAITING plan errors."""


class WaitingSchemaError(WaitingError):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where


class WaitingPlanNotFound(WaitingError, LookupError):
    pass


class WaitingTransitionError(WaitingError, ValueError):
    pass


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingPlan:
    plan_id: str
    tenant_id: str
    worker_id: str
    match_key: str
    expires_at: datetime  # wait_timeout_at
    created_at: datetime
    title: str = ""
    on_timeout: Literal["remind", "escalate", "remind_then_escalate", "close"] = "remind_then_escalate"
    requires_confirmation: bool = False  # the gate said confirm before it parked: resume needs a person
    resume: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))  # what to run on resume
    state: WaitState = "waiting"
    gated_by: GatedBy | None = None
    event_id: str | None = None  # the event that woke it
    event: Mapping[str, Any] | None = None  # that event's payload, for the resumed run
    gater: str | None = None  # the runtime instance that gated it (event, manual): recovery if it died
    reminders: int = 0
    resumed_by: str | None = None  # the runtime instance running its resume (RUNNING): start-up recovery
    version: int = 1
    updated_at: datetime | None = None

    def __post_init__(self) -> None:
        validate_id(self.plan_id, "plan id")
        validate_id(self.tenant_id, "tenant id")
        validate_id(self.worker_id, "worker id")
        validate_match_key(self.match_key)
        if self.state not in STATES:
            raise ValueError(f"state {self.state!r} is not one of {sorted(STATES)}")
        object.__setattr__(self, "expires_at", _utc(self.expires_at, "expires_at"))
        object.__setattr__(self, "created_at", _utc(self.created_at, "created_at"))
        if not isinstance(self.resume, MappingProxyType):
            object.__setattr__(self, "resume", freeze(dict(self.resume)))
        if self.event is not None and not isinstance(self.event, MappingProxyType):
            object.__setattr__(self, "event", freeze(dict(self.event)))

    @property
    def key(self) -> tuple[str, str, str]:
        return self.tenant_id, self.worker_id, self.plan_id

    def ended_before(self, horizon: datetime) -> bool:
        """Ended (done, cancelled, closed) and last changed before `horizon`: past its retention."""
        return self.state in ENDED_STATES and (self.updated_at or self.created_at) < horizon

    def moved(self, state: WaitState, now: datetime, **changes: Any) -> WaitingPlan:
        return replace(self, state=state, version=self.version + 1, updated_at=now, **changes)


def plan_to_json(plan: WaitingPlan) -> dict[str, Any]:
    data: dict[str, Any] = {"schema_version": SCHEMA_VERSION}
    for name in WaitingPlan.__dataclass_fields__:
        value = getattr(plan, name)
        data[name] = value.isoformat() if isinstance(value, datetime) else thaw(value)
    return data


def plan_from_json(data: object, where: str) -> WaitingPlan:
    if isinstance(data, str | bytes):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise WaitingSchemaError(where, f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise WaitingSchemaError(where, "a plan must be a JSON object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise WaitingSchemaError(where, f"schema_version {version!r} is unknown; this build reads {SCHEMA_VERSION}")
    fields = {k: v for k, v in data.items() if k != "schema_version"}
    try:
        for name in ("expires_at", "created_at", "updated_at"):
            if fields.get(name) is not None:
                fields[name] = datetime.fromisoformat(fields[name])
        return WaitingPlan(**fields)
    except (TypeError, ValueError) as exc:
        raise WaitingSchemaError(where, str(exc)) from None
