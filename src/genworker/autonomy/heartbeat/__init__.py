"""The heartbeat: per worker, on a schedule, take the inbox's pending items, drop concerns already
taken up, and decide per item — a main-session summary turn, a standard task, or an isolated run.

Silence is the default: no items, no model call; a summary turn that answers ``"attention": false``
leaves nothing user-visible; the main session's heartbeat history rolls up, so it stays bounded.
"""

from genworker.autonomy.heartbeat.answer import (
    ANSWER_SHAPE,
    HeartbeatAnswer,
    NeedsAttention,
    NothingToReport,
    ParsedAnswer,
    Unreadable,
    parse_answer,
)
from genworker.autonomy.heartbeat.config import HeartbeatSettings, heartbeat_settings
from genworker.autonomy.heartbeat.errors import HeartbeatError, HeartbeatFileError
from genworker.autonomy.heartbeat.ledger import (
    DEFAULT_WINDOW,
    LEDGER_FILE,
    LEDGER_SCHEMA_VERSION,
    Admission,
    Admitted,
    AlreadySeen,
    AttentionLedger,
    LedgerEntry,
    Settlement,
    concern_of,
    describe_entry,
)
from genworker.autonomy.heartbeat.main_session import (
    HEARTBEAT_NAME,
    ROLLUP_NAME,
    HistoryLimits,
    MainSessionHeartbeat,
    heartbeat_messages,
    roll_up,
)
from genworker.autonomy.heartbeat.meta import (
    META_FILE,
    META_SCHEMA_VERSION,
    HeartbeatMeta,
    HeartbeatMetaStore,
    OpenConcern,
    TaskRef,
    meta_json,
)
from genworker.autonomy.heartbeat.notice import AttentionReport, NotifyOwner, OwnerNotices, report_priority
from genworker.autonomy.heartbeat.outcomes import (
    HeartbeatReport,
    ItemResult,
    Reported,
    Silent,
    SummaryFailed,
    SummaryOutcome,
)
from genworker.autonomy.heartbeat.runner import (
    HEARTBEAT_THREAD,
    TOPIC_COMPLETED,
    TOPIC_ISOLATED_REPORTED,
    TOPIC_REPORTED,
    HeartbeatRunner,
)
from genworker.autonomy.heartbeat.scheduler import HeartbeatScheduler, job_id
from genworker.autonomy.heartbeat.service import HeartbeatService
from genworker.autonomy.heartbeat.strategy import (
    Decision,
    DefaultHeartbeatStrategy,
    Dismiss,
    HeartbeatStrategy,
    RunIsolated,
    SubmitTask,
    Summarize,
)

__all__ = [
    "ANSWER_SHAPE",
    "DEFAULT_WINDOW",
    "HEARTBEAT_NAME",
    "HEARTBEAT_THREAD",
    "LEDGER_FILE",
    "LEDGER_SCHEMA_VERSION",
    "META_FILE",
    "META_SCHEMA_VERSION",
    "ROLLUP_NAME",
    "TOPIC_COMPLETED",
    "TOPIC_ISOLATED_REPORTED",
    "TOPIC_REPORTED",
    "Admission",
    "Admitted",
    "AlreadySeen",
    "AttentionLedger",
    "AttentionReport",
    "Decision",
    "DefaultHeartbeatStrategy",
    "Dismiss",
    "HeartbeatAnswer",
    "HeartbeatError",
    "HeartbeatFileError",
    "HeartbeatMeta",
    "HeartbeatMetaStore",
    "HeartbeatReport",
    "HeartbeatRunner",
    "HeartbeatScheduler",
    "HeartbeatService",
    "HeartbeatSettings",
    "HeartbeatStrategy",
    "HistoryLimits",
    "ItemResult",
    "LedgerEntry",
    "MainSessionHeartbeat",
    "NeedsAttention",
    "NothingToReport",
    "NotifyOwner",
    "OpenConcern",
    "OwnerNotices",
    "ParsedAnswer",
    "Reported",
    "RunIsolated",
    "Settlement",
    "Silent",
    "SubmitTask",
    "Summarize",
    "SummaryFailed",
    "SummaryOutcome",
    "TaskRef",
    "Unreadable",
    "concern_of",
    "describe_entry",
    "heartbeat_messages",
    "heartbeat_settings",
    "job_id",
    "meta_json",
    "parse_answer",
    "report_priority",
    "roll_up",
]
