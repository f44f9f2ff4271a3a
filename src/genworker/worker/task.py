"""Task and run values: the TaskManifest a worker executes, the provenance it carries, and the
RunRecord of one execution attempt with its state machine (GoodBuddy §6.2).

Only values and the transition table live here. `genworker.worker.lifecycle` is the one place
that persists them or changes a run's state.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import ConfigDict

from genworker.engine.state import GraphRecord, PlanRecord
from genworker.ids import validate_id
from genworker.tools.audit import AuditRecord, OutcomeKind
from genworker.worker.contract_record import ContractCheck, DeliveryRecord, EscalationRecord

if TYPE_CHECKING:  # keeps reading and writing runs free of the model stack
    from genworker.llm.client import LLMCallRecord

__all__ = [
    "ACTIVE_STATES",
    "RUN_SCHEMA_VERSION",
    "TASK_SCHEMA_VERSION",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "ChildRun",
    "Deliverable",
    "GateLevel",
    "GoalStatus",
    "GoalVerdict",
    "GovernanceAction",
    "GovernanceVerdict",
    "ModelUsage",
    "PendingApproval",
    "RunError",
    "RunFallback",
    "RunRecord",
    "RunRef",
    "RunState",
    "RunTimings",
    "StateChange",
    "TaskManifest",
    "TaskProvenance",
    "ToolCallRecord",
    "can_transition",
    "new_run_id",
    "new_task_id",
    "schedule_idempotency_key",
]

TASK_SCHEMA_VERSION = 1
RUN_SCHEMA_VERSION = 1

# Persisted values reject keys they do not know (a typo must not silently drop data).
_STRICT: ConfigDict = ConfigDict(extra="forbid")


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    PAUSED = "paused"
    EVALUATING = "evaluating"
    COMPLETED = "completed"  # the protocol finished; says nothing about the goal (see GoalStatus)
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    BUDGET_EXCEEDED = "budget_exceeded"
    SUPERSEDED = "superseded"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


class GoalStatus(StrEnum):
    MET = "met"
    NOT_MET = "not_met"
    INCONCLUSIVE = "inconclusive"
    NOT_APPLICABLE = "not_applicable"


_ENDINGS = frozenset(
    {RunState.FAILED, RunState.CANCELLED, RunState.INTERRUPTED, RunState.BUDGET_EXCEEDED, RunState.SUPERSEDED}
)
TERMINAL_STATES = _ENDINGS | {RunState.COMPLETED}
ACTIVE_STATES = frozenset(RunState) - TERMINAL_STATES

TRANSITIONS: Mapping[RunState, frozenset[RunState]] = MappingProxyType(
    {
        RunState.QUEUED: _ENDINGS | {RunState.RUNNING},
        RunState.RUNNING: _ENDINGS
        | {RunState.WAITING_APPROVAL, RunState.PAUSED, RunState.EVALUATING, RunState.COMPLETED},
        RunState.WAITING_APPROVAL: _ENDINGS | {RunState.RUNNING},
        RunState.PAUSED: _ENDINGS | {RunState.RUNNING},
        RunState.EVALUATING: _ENDINGS | {RunState.COMPLETED},
        **{state: frozenset() for state in TERMINAL_STATES},
    }
)
"""Allowed moves: every active state may end as failed/cancelled/interrupted/budget_exceeded/
superseded; terminal states are final."""


def can_transition(source: RunState, target: RunState) -> bool:
    return target in TRANSITIONS[source]


def _aware(value: datetime | None, name: str) -> None:
    if value is not None and value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {value.isoformat()}")


def _nonempty(value: str, name: str) -> None:
    if not value.strip():
        raise ValueError(f"{name} must not be empty")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _new_id(prefix: str) -> str:
    return f"{prefix}-{_utc_now():%Y%m%dT%H%M%S%f}-{secrets.token_hex(4)}"


def new_task_id() -> str:
    """A fresh, time-ordered task id."""
    return _new_id("task")


def new_run_id() -> str:
    """A fresh, time-ordered run id."""
    return _new_id("run")


def schedule_idempotency_key(plan_id: str, scheduled_for: datetime, plan_version: int | str) -> str:
    """The idempotency key of a scheduled trigger: plan + scheduled_for (UTC) + plan version (GoodBuddy §7.4)."""
    _aware(scheduled_for, "scheduled_for")
    return f"plan:{plan_id}:{scheduled_for.astimezone(UTC).isoformat()}:v{plan_version}"


# -- the task -----------------------------------------------------------------------

GovernanceAction = Literal["auto", "gated", "blocked"]
GateLevel = Literal["auto", "gated"]


@dataclass(frozen=True, slots=True)
class GovernanceVerdict:
    """The governance decision a task was admitted under, as recorded in its provenance."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    action: GovernanceAction
    posture: str = ""
    risk_tier: str = ""
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskProvenance:
    """Why a task exists: its source, the goal/duty/process step it serves, and the decisions behind it."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    source_type: str = "manual"  # chat | task | im | event | duty | goal | heartbeat | schedule | manual ...
    source_id: str | None = None
    goal_id: str | None = None
    duty_id: str | None = None
    trigger_id: str | None = None
    execution_depth: str | None = None  # quick | standard | deep: the duty's for the trigger, else standard
    process_id: str | None = None
    step_id: str | None = None
    contract_version: str | None = None
    contract_snapshot_ref: str | None = None
    policy_snapshot_ref: str | None = None
    governance_decision: GovernanceVerdict | None = None
    approval_ref: str | None = None
    audit_refs: tuple[str, ...] = ()
    scheduled_for: datetime | None = None
    idempotency_key: str | None = None
    parent_run_id: str | None = None  # delegated work: the run that started it (same tenant)
    parent_worker_id: str | None = None
    delegation_depth: int = 0  # 0: not delegated; a child is its parent's depth + 1

    def __post_init__(self) -> None:
        _nonempty(self.source_type, "source_type")
        _aware(self.scheduled_for, "scheduled_for")
        if self.idempotency_key is not None:
            _nonempty(self.idempotency_key, "idempotency_key")
        if (self.parent_run_id is None) != (self.parent_worker_id is None):
            raise ValueError("parent_run_id and parent_worker_id are set together")
        if self.delegation_depth < 0 or (self.delegation_depth > 0) != (self.parent_run_id is not None):
            raise ValueError("delegation_depth is 0 without a parent run and at least 1 with one")


@dataclass(frozen=True, slots=True)
class TaskManifest:
    """What one task asks a worker to do. Written once; moved from tasks/active/ to tasks/done/ when
    its run ends."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    task_id: str
    run_id: str
    tenant_id: str
    worker_id: str
    text: str
    created_at: datetime
    thread_id: str | None = None
    skill_id: str | None = None
    preferred_skill_ids: tuple[str, ...] = ()
    provenance: TaskProvenance = field(default_factory=TaskProvenance)
    gate_level: GateLevel = "auto"
    pre_script: str = ""
    schema_version: int = TASK_SCHEMA_VERSION

    def __post_init__(self) -> None:
        validate_id(self.task_id, "task_id")
        validate_id(self.run_id, "run_id")
        validate_id(self.tenant_id, "tenant_id")
        validate_id(self.worker_id, "worker_id")
        _aware(self.created_at, "created_at")
        if self.schema_version != TASK_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not {TASK_SCHEMA_VERSION}")


# -- the run ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunRef:
    """Where a run lives: tenant, worker and run id (all validated)."""

    tenant_id: str
    worker_id: str
    run_id: str

    def __post_init__(self) -> None:
        validate_id(self.tenant_id, "tenant_id")
        validate_id(self.worker_id, "worker_id")
        validate_id(self.run_id, "run_id")

    def __str__(self) -> str:
        return f"{self.tenant_id}/{self.worker_id}/{self.run_id}"


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    name: str
    call_id: str
    outcome: OutcomeKind | Literal["outcome_unknown"]  # outcome_unknown: started, then the process died
    duration_ms: float = 0.0
    code: str | None = None  # the denial / failure code, when there is one

    @classmethod
    def from_audit(cls, record: AuditRecord) -> ToolCallRecord:
        return cls(record.tool, record.call_id, record.outcome, record.duration_ms, record.code)


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """One model call of a run (from `LLMCallRecord`)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    purpose: str
    tier: str
    group: str
    model: str
    latency_ms: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    error: str | None = None

    @classmethod
    def from_record(cls, record: LLMCallRecord) -> ModelUsage:
        return cls(
            purpose=record.purpose,
            tier=record.tier,
            group=record.requested_group,
            model=record.actual_model,
            latency_ms=record.latency_ms,
            prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens,
            cost_usd=record.cost_usd,
            error=record.error,
        )


@dataclass(frozen=True, slots=True)
class Deliverable:
    """What a run produced: text inline, or a reference to a file or an event."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    kind: Literal["text", "file", "event"]
    content: str = ""
    ref: str = ""
    title: str = ""

    def __post_init__(self) -> None:
        if self.kind == "text" and not self.content:
            raise ValueError("a text deliverable needs content")
        if self.kind != "text" and not self.ref:
            raise ValueError(f"a {self.kind} deliverable needs a ref")


@dataclass(frozen=True, slots=True)
class RunError:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    code: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class RunFallback:
    """The engine fallback a run used (RunResult.fallback: from -> to, and why)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    source: str
    target: str
    reason: str = ""

    @classmethod
    def from_mapping(cls, value: Mapping[str, str]) -> RunFallback | None:
        if not value:
            return None
        return cls(value.get("from", ""), value.get("to", ""), value.get("reason", ""))


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """The tool call a run waits on. Its (redacted) arguments are in the tool audit under call_id."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    call_id: str
    tool: str
    requested_at: datetime
    reason: str = ""

    def __post_init__(self) -> None:
        _aware(self.requested_at, "requested_at")


@dataclass(frozen=True, slots=True)
class RunTimings:
    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    queued_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    queue_ms: float | None = None  # queued -> started
    run_ms: float | None = None  # started -> finished
    total_ms: float | None = None  # queued -> finished

    def __post_init__(self) -> None:
        _aware(self.queued_at, "queued_at")
        _aware(self.started_at, "started_at")
        _aware(self.finished_at, "finished_at")


@dataclass(frozen=True, slots=True)
class StateChange:
    """One entry of a run's lifecycle history (source is None for the creation)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    at: datetime
    source: RunState | None
    target: RunState
    note: str = ""

    def __post_init__(self) -> None:
        _aware(self.at, "at")


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A run this run started through a delegate tool (its record names this run as its parent)."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    worker_id: str
    run_id: str
    created_at: datetime

    def __post_init__(self) -> None:
        validate_id(self.worker_id, "worker_id")
        validate_id(self.run_id, "run_id")
        _aware(self.created_at, "created_at")


@dataclass(frozen=True, slots=True)
class GoalVerdict:
    """The goal evaluator's judgement of a completed run (docs/goals.md, "Evaluation"): the goal and
    goal task it was judged against, why, and which of the run's evidence it rests on."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    status: GoalStatus  # met | not_met | inconclusive
    goal_id: str
    evaluated_at: datetime
    task_id: str | None = None  # None: judged against the goal as a whole
    reasons: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()  # references into the run: "output", "tool:{call_id}"
    evaluator: str = ""  # the evaluator's version
    usage: ModelUsage | None = None  # its model call

    def __post_init__(self) -> None:
        if self.status is GoalStatus.NOT_APPLICABLE:
            raise ValueError("a goal verdict is met, not_met or inconclusive")
        _aware(self.evaluated_at, "evaluated_at")


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One execution attempt of a task: its state, outcome, usage and history."""

    __pydantic_config__: ClassVar[ConfigDict] = _STRICT

    run_id: str
    task_id: str
    tenant_id: str
    worker_id: str
    state: RunState
    timings: RunTimings
    thread_id: str | None = None
    goal_status: GoalStatus = GoalStatus.NOT_APPLICABLE
    goal_verdict: GoalVerdict | None = None  # what set goal_status (docs/goals.md, "Evaluation")
    provenance: TaskProvenance = field(default_factory=TaskProvenance)
    skill_id: str | None = None
    engine: str = ""
    tool_calls: tuple[ToolCallRecord, ...] = ()
    model_usage: tuple[ModelUsage, ...] = ()
    deliverables: tuple[Deliverable, ...] = ()
    error: RunError | None = None
    fallback: RunFallback | None = None
    pending_approval: PendingApproval | None = None
    history: tuple[StateChange, ...] = ()
    owner: str | None = None  # the runtime instance running it (see lifecycle/leases.py)
    checks: tuple[ContractCheck, ...] = ()  # a duty run: its contract's checks (worker/contract_record.py)
    deliveries: tuple[DeliveryRecord, ...] = ()  # a duty run: where its result went, one per destination
    escalations: tuple[EscalationRecord, ...] = ()  # a duty run: who it was escalated to, and how that went
    children: tuple[ChildRun, ...] = ()  # runs it delegated, oldest first
    plan: PlanRecord | None = None  # planning: the plan and its nodes' states (worker/engine_state.py)
    graph: GraphRecord | None = None  # langgraph: the checkpoint thread and where it stands
    schema_version: int = RUN_SCHEMA_VERSION
    version: int = 1  # bumped on every write

    def __post_init__(self) -> None:
        validate_id(self.task_id, "task_id")
        RunRef(self.tenant_id, self.worker_id, self.run_id)
        if self.schema_version != RUN_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not {RUN_SCHEMA_VERSION}")
        if self.version < 1:
            raise ValueError("version must be 1 or more")

    @property
    def ref(self) -> RunRef:
        return RunRef(self.tenant_id, self.worker_id, self.run_id)

    @property
    def terminal(self) -> bool:
        return self.state.terminal
