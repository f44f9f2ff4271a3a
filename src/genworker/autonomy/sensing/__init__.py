"""Sensing: sensors turn what changed in the world into facts in a worker's inbox.

Pull sensors (workspace_file, git, email) are polled by a SensorRunner per worker and keep a cursor
in `sensor_snapshots/`; the webhook sensor is fed by `POST /api/v1/webhook/ingest/...`. Every fact is
filtered, routed by the sensor's routing_rules and written to the inbox before the cursor moves.
"""

from genworker.autonomy.sensing.base import Clock, Observation, PullSensor, utc_now
from genworker.autonomy.sensing.cursors import CURSOR_SCHEMA_VERSION, Cursor, CursorStore
from genworker.autonomy.sensing.email import EmailSensor
from genworker.autonomy.sensing.errors import CursorError, SensorConfigError, SensorError, SensorPollError
from genworker.autonomy.sensing.factory import build_sensor, worker_dir
from genworker.autonomy.sensing.facts import GOAL_PROPOSED, Emission, Fact, FactEmitter
from genworker.autonomy.sensing.filters import (
    EmailFilter,
    GitFilter,
    SensorFilter,
    WebhookFilter,
    WorkspaceFileFilter,
    parse_filter,
)
from genworker.autonomy.sensing.git import GitSensor
from genworker.autonomy.sensing.registry import SensorRegistry
from genworker.autonomy.sensing.routing import GOAL_ROUTE, accepts, is_goal_worthy, lookup, route_fact
from genworker.autonomy.sensing.runner import DEFAULT_POLL_INTERVAL_S, SensorRunner, SensorStatus
from genworker.autonomy.sensing.workspace_file import WorkspaceFileSensor

__all__ = [
    "CURSOR_SCHEMA_VERSION",
    "DEFAULT_POLL_INTERVAL_S",
    "GOAL_PROPOSED",
    "GOAL_ROUTE",
    "Clock",
    "Cursor",
    "CursorError",
    "CursorStore",
    "EmailFilter",
    "EmailSensor",
    "Emission",
    "Fact",
    "FactEmitter",
    "GitFilter",
    "GitSensor",
    "Observation",
    "PullSensor",
    "SensorConfigError",
    "SensorError",
    "SensorFilter",
    "SensorPollError",
    "SensorRegistry",
    "SensorRunner",
    "SensorStatus",
    "WebhookFilter",
    "WorkspaceFileFilter",
    "WorkspaceFileSensor",
    "accepts",
    "build_sensor",
    "is_goal_worthy",
    "lookup",
    "parse_filter",
    "route_fact",
    "utc_now",
    "worker_dir",
]
