"""Context spaces (Steward): sensed facts gathered into work contexts — one per project, goal or
commitment in focus — before they become tasks. docs/context-spaces.md describes them.

An immutable event log of `ContextEvent`s; a router that files each fact by strong anchor, or by a
bounded multiple-choice question to the model, resurrecting an old space before creating a new one;
a lifecycle (active -> dormant -> parked -> archived, pins) that never deletes; and a `TaskCandidate`
once a space's evidence reaches its threshold. Spaces are Markdown files under the worker's
``runtime/spaces/``, with a rebuildable SQLite FTS5 index; in the shared profile they are in Redis.
"""

from genworker.autonomy.spaces.brief import pending_spaces
from genworker.autonomy.spaces.chooser import CHOICE_TOOL, NEW, Choice, ChooserUnavailable, SpaceChooser
from genworker.autonomy.spaces.config import DEFAULT_SETTINGS, SpaceSettings, registry_settings, resolve_settings
from genworker.autonomy.spaces.errors import SpaceError, SpaceFileError, SpaceNotFound, SpaceTransitionError
from genworker.autonomy.spaces.evidence import evidence_score
from genworker.autonomy.spaces.facts import event_from_item
from genworker.autonomy.spaces.file_event_log import FileEventLog
from genworker.autonomy.spaces.file_store import FileSpaceStore
from genworker.autonomy.spaces.index import SpaceIndex
from genworker.autonomy.spaces.models import (
    SCHEMA_VERSION,
    Change,
    ContextEvent,
    ContextSpace,
    EvidenceRef,
    SpaceState,
    TaskCandidate,
)
from genworker.autonomy.spaces.redis_store import RedisEventLog, RedisSpaceStore
from genworker.autonomy.spaces.router import ContextSpaceRouter
from genworker.autonomy.spaces.service import Absorbed, Candidate, Gathered, RunOpen, SpaceService
from genworker.autonomy.spaces.store import EventLog, SpaceStore
from genworker.autonomy.spaces.wiring import build_spaces

__all__ = [
    "CHOICE_TOOL",
    "DEFAULT_SETTINGS",
    "NEW",
    "SCHEMA_VERSION",
    "Absorbed",
    "Candidate",
    "Change",
    "Choice",
    "ChooserUnavailable",
    "ContextEvent",
    "ContextSpace",
    "ContextSpaceRouter",
    "EventLog",
    "EvidenceRef",
    "FileEventLog",
    "FileSpaceStore",
    "Gathered",
    "RedisEventLog",
    "RedisSpaceStore",
    "RunOpen",
    "SpaceChooser",
    "SpaceError",
    "SpaceFileError",
    "SpaceIndex",
    "SpaceNotFound",
    "SpaceService",
    "SpaceSettings",
    "SpaceState",
    "SpaceStore",
    "SpaceTransitionError",
    "TaskCandidate",
    "build_spaces",
    "event_from_item",
    "evidence_score",
    "pending_spaces",
    "registry_settings",
    "resolve_settings",
]
