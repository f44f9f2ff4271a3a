"""Duties on their triggers: schedule (cron / interval), event, condition and manual, each slot fired
exactly once through the WorkerRouter, with misfire policies and an execution log."""

from genworker.autonomy.duties.conditions import MetricSource, MetricValue, RuleError, StaticMetrics, evaluate_rule
from genworker.autonomy.duties.errors import DutyNotFound, DutyStateError
from genworker.autonomy.duties.routing import route_through
from genworker.autonomy.duties.scheduler import JOB_PREFIX, DutyScheduler, FireOutcome, Route, event_matches
from genworker.autonomy.duties.slots import aps_trigger, due_slots, duty_version, fire_key, select_slots
from genworker.autonomy.duties.store import DutyState, DutyStore, ExecutionRecord, TriggerState
from genworker.autonomy.duties.worker_metrics import MetricError, WorkerMetrics

__all__ = [
    "JOB_PREFIX",
    "DutyNotFound",
    "DutyScheduler",
    "DutyState",
    "DutyStateError",
    "DutyStore",
    "ExecutionRecord",
    "FireOutcome",
    "MetricError",
    "MetricSource",
    "MetricValue",
    "Route",
    "RuleError",
    "StaticMetrics",
    "TriggerState",
    "WorkerMetrics",
    "aps_trigger",
    "due_slots",
    "duty_version",
    "evaluate_rule",
    "event_matches",
    "fire_key",
    "route_through",
    "select_slots",
]
