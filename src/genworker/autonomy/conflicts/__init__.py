"""The Conflict Arbiter (Steward): resource conflicts between plans, found at plan time and at commit
time under a resource lock, resolved by merge, serialize, replan or a person (docs/conflicts.md)."""

from genworker.autonomy.conflicts.arbiter import Committed, ConflictArbiter, Escalated, Merged, PlanLiveness, Replan
from genworker.autonomy.conflicts.commit import CommitCheck, conflict_marker
from genworker.autonomy.conflicts.errors import (
    ConflictError,
    ConflictFileError,
    ConflictNotFound,
    ConflictNotOpen,
    IllegalPlanTransition,
    ResourceBusy,
)
from genworker.autonomy.conflicts.ledger import REDIS_PREFIX, FileLedger, RedisLedger, ResourceLedger
from genworker.autonomy.conflicts.models import (
    PLAN_TRANSITIONS,
    ConflictCase,
    EffectRecord,
    PlanRecord,
    PlanState,
    ResourceState,
)
from genworker.autonomy.conflicts.store import ConflictStore

__all__ = [
    "PLAN_TRANSITIONS",
    "REDIS_PREFIX",
    "CommitCheck",
    "Committed",
    "ConflictArbiter",
    "ConflictCase",
    "ConflictError",
    "ConflictFileError",
    "ConflictNotFound",
    "ConflictNotOpen",
    "ConflictStore",
    "EffectRecord",
    "Escalated",
    "FileLedger",
    "IllegalPlanTransition",
    "Merged",
    "PlanLiveness",
    "PlanRecord",
    "PlanState",
    "RedisLedger",
    "Replan",
    "ResourceBusy",
    "ResourceLedger",
    "ResourceState",
    "conflict_marker",
]
