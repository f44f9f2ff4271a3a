"""WAITING plans (Steward): parked work indexed by `match_key`, woken once by a matching event,
and a timeout scan that sends expired waits back to the gate. File backend by default, Redis
when REDIS_URL is set. docs/waiting.md describes them."""

from genworker.autonomy.waiting.file_store import FileWaitingStore
from genworker.autonomy.waiting.models import (
    SCHEMA_VERSION,
    WaitingError,
    WaitingPlan,
    WaitingPlanNotFound,
    WaitingSchemaError,
    WaitingTransitionError,
    WaitState,
    plan_from_json,
    plan_to_json,
)
from genworker.autonomy.waiting.redis_store import RedisWaitingStore
from genworker.autonomy.waiting.service import ResumeHandler, TimeoutHandler, WaitingService
from genworker.autonomy.waiting.store import WaitingStore
from genworker.ids import validate_match_key  # the key grammar plans are indexed by (owned by ids.py)

__all__ = [
    "SCHEMA_VERSION",
    "FileWaitingStore",
    "RedisWaitingStore",
    "ResumeHandler",
    "TimeoutHandler",
    "WaitState",
    "WaitingError",
    "WaitingPlan",
    "WaitingPlanNotFound",
    "WaitingSchemaError",
    "WaitingService",
    "WaitingStore",
    "WaitingTransitionError",
    "plan_from_json",
    "plan_to_json",
    "validate_match_key",
]
