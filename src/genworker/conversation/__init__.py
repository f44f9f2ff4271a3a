"""Conversation sessions: thread and main sessions, their stores, and per-thread turn ordering.

Autonomy (inbox, heartbeat, isolated runs) lives elsewhere; this package only owns sessions.
"""

from __future__ import annotations

from genworker.conversation.aggregate import SessionAggregate
from genworker.conversation.codec import decode_session, encode_session
from genworker.conversation.errors import (
    ConcurrentUpdateError,
    SessionCorruptError,
    SessionError,
    SessionNotFoundError,
    SessionSchemaError,
)
from genworker.conversation.file_store import FileSessionStore
from genworker.conversation.manager import SessionManager, recent_messages
from genworker.conversation.models import (
    MAIN_THREAD_ID,
    SCHEMA_VERSION,
    ArchiveChunk,
    AssistantMessage,
    ChatMessage,
    ConversationSession,
    SessionKind,
    SessionSummary,
    SystemMessage,
    ToolCallRequest,
    ToolMessage,
    UserMessage,
    main_session_id,
    thread_session_id,
    to_model_messages,
    validate_thread_id,
)
from genworker.conversation.queue import QueueStatus, ThreadQueue
from genworker.conversation.redis_lock import RedisThreadLock
from genworker.conversation.redis_store import RedisSessionStore
from genworker.conversation.store import SessionStore

__all__ = [
    "MAIN_THREAD_ID",
    "SCHEMA_VERSION",
    "ArchiveChunk",
    "AssistantMessage",
    "ChatMessage",
    "ConcurrentUpdateError",
    "ConversationSession",
    "FileSessionStore",
    "QueueStatus",
    "RedisSessionStore",
    "RedisThreadLock",
    "SessionAggregate",
    "SessionCorruptError",
    "SessionError",
    "SessionKind",
    "SessionManager",
    "SessionNotFoundError",
    "SessionSchemaError",
    "SessionStore",
    "SessionSummary",
    "SystemMessage",
    "ThreadQueue",
    "ToolCallRequest",
    "ToolMessage",
    "UserMessage",
    "decode_session",
    "encode_session",
    "main_session_id",
    "recent_messages",
    "thread_session_id",
    "to_model_messages",
    "validate_thread_id",
]
