"""Conversation values: chat messages (a union tagged by role), sessions and their ids.

A session id is a validated id, so it can name a file: ``{worker_id}.{thread_id}`` for a thread,
``{worker_id}.main`` for the worker's main session. Thread ids may not contain '.', which keeps the
mapping one-to-one even for worker ids that do, and ``main`` is reserved.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import AwareDatetime, Field, NonNegativeInt, PositiveInt

from genworker.ids import InvalidIdError, validate_id
from genworker.workspace.models.base import JsonMap, freeze

__all__ = [
    "MAIN_THREAD_ID",
    "SCHEMA_VERSION",
    "ArchiveChunk",
    "AssistantMessage",
    "ChatMessage",
    "ConversationSession",
    "Role",
    "SessionKind",
    "SessionSummary",
    "SystemMessage",
    "ToolCallRequest",
    "ToolMessage",
    "UserMessage",
    "main_session_id",
    "session_id_for",
    "summary_of",
    "thread_session_id",
    "to_model_messages",
    "utc_now",
    "validate_thread_id",
]

SCHEMA_VERSION: Final = 1
MAIN_THREAD_ID: Final = "main"
MAX_THREAD_ID_LEN: Final = 64

Role: TypeAlias = Literal["user", "assistant", "tool", "system"]
SessionKind: TypeAlias = Literal["thread", "main"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _require_aware(value: datetime, what: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {value.isoformat()}")


# -- messages ---------------------------------------------------------------------


class _Timestamped:
    __slots__ = ()
    created_at: datetime

    def __post_init__(self) -> None:
        _require_aware(self.created_at, "created_at")


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call an assistant message asked for; `arguments` is the raw JSON text from the model."""

    id: str
    name: str
    arguments: str = "{}"


@dataclass(frozen=True, slots=True)
class UserMessage(_Timestamped):
    role: Literal["user"] = field(default="user", kw_only=True)
    content: str
    _: KW_ONLY
    created_at: AwareDatetime = field(default_factory=utc_now)
    run_id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class AssistantMessage(_Timestamped):
    role: Literal["assistant"] = field(default="assistant", kw_only=True)
    content: str
    _: KW_ONLY
    tool_calls: tuple[ToolCallRequest, ...] = ()
    created_at: AwareDatetime = field(default_factory=utc_now)
    run_id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ToolMessage(_Timestamped):
    role: Literal["tool"] = field(default="tool", kw_only=True)
    content: str
    tool_call_id: str
    _: KW_ONLY
    created_at: AwareDatetime = field(default_factory=utc_now)
    run_id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class SystemMessage(_Timestamped):
    role: Literal["system"] = field(default="system", kw_only=True)
    content: str
    _: KW_ONLY
    created_at: AwareDatetime = field(default_factory=utc_now)
    run_id: str | None = None
    name: str | None = None


ChatMessage: TypeAlias = Annotated[
    UserMessage | AssistantMessage | ToolMessage | SystemMessage, Field(discriminator="role")
]


def _model_message(message: ChatMessage) -> dict[str, Any]:
    match message:
        case AssistantMessage(tool_calls=calls) if calls:
            return {
                "role": "assistant",
                "content": message.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in calls
                ],
            }
        case ToolMessage(tool_call_id=call_id):
            return {"role": "tool", "tool_call_id": call_id, "content": message.content}
        case _:
            out: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.name:
                out["name"] = message.name
            return out


def to_model_messages(messages: Iterable[ChatMessage]) -> tuple[dict[str, Any], ...]:
    """OpenAI-style message dicts, as the engines and LiteLLM take them."""
    return tuple(_model_message(m) for m in messages)


# -- session ids ------------------------------------------------------------------


def validate_thread_id(thread_id: object) -> str:
    value = validate_id(thread_id, "thread id")
    if "." in value or len(value) > MAX_THREAD_ID_LEN:
        raise InvalidIdError(
            f"thread id {value!r} is not valid: use 1-{MAX_THREAD_ID_LEN} letters, digits, '_' or '-' (no '.')"
        )
    if value == MAIN_THREAD_ID:
        raise InvalidIdError(f"thread id {MAIN_THREAD_ID!r} is reserved for the worker's main session")
    return value


def thread_session_id(worker_id: str, thread_id: str) -> str:
    return validate_id(f"{validate_id(worker_id, 'worker id')}.{validate_thread_id(thread_id)}", "session id")


def main_session_id(worker_id: str) -> str:
    return validate_id(f"{validate_id(worker_id, 'worker id')}.{MAIN_THREAD_ID}", "session id")


def session_id_for(kind: SessionKind, worker_id: str, thread_id: str) -> str:
    if kind == "main":
        if thread_id != MAIN_THREAD_ID:
            raise InvalidIdError(f"a main session has thread id {MAIN_THREAD_ID!r}, got {thread_id!r}")
        return main_session_id(worker_id)
    return thread_session_id(worker_id, thread_id)


# -- sessions ---------------------------------------------------------------------


def _empty_map() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationSession:
    """One thread or main session. Change it only through `SessionAggregate`.

    `version` counts successful saves (0: never stored) and is the compare-and-set token.
    `ttl_s` is a sliding expiry, counted from the last save. `archived` counts the thread's oldest
    messages moved to its archive (`SessionStore.archive`); `messages` holds the ones after them.
    """

    schema_version: int = SCHEMA_VERSION
    session_id: str
    tenant_id: str
    worker_id: str
    kind: SessionKind
    thread_id: str
    created_at: AwareDatetime
    updated_at: AwareDatetime
    version: NonNegativeInt = 0
    ttl_s: PositiveInt | None = None
    metadata: JsonMap = field(default_factory=_empty_map)
    messages: tuple[ChatMessage, ...] = ()
    archived: NonNegativeInt = 0

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {SCHEMA_VERSION}, got {self.schema_version!r}")
        validate_id(self.tenant_id, "tenant id")
        expected = session_id_for(self.kind, self.worker_id, self.thread_id)
        if self.session_id != expected:
            raise ValueError(f"session_id {self.session_id!r} does not match its worker and thread ({expected!r})")
        _require_aware(self.created_at, "created_at")
        _require_aware(self.updated_at, "updated_at")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {self.ttl_s}")
        if not isinstance(self.metadata, MappingProxyType):
            object.__setattr__(self, "metadata", freeze(self.metadata))
        object.__setattr__(self, "messages", tuple(self.messages))


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiveChunk:
    """Messages `start` to `start + len(messages)` of a thread, counted from its first message, moved
    out of the session (`ConversationSession.archived`). Stored under its `start`, so writing it
    again writes the same thing."""

    schema_version: int = SCHEMA_VERSION
    tenant_id: str
    session_id: str
    start: NonNegativeInt
    messages: tuple[ChatMessage, ...]

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {SCHEMA_VERSION}, got {self.schema_version!r}")
        object.__setattr__(self, "messages", tuple(self.messages))


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSummary:
    """What `SessionStore.list` returns: enough to show a thread list without loading messages."""

    session_id: str
    tenant_id: str
    worker_id: str
    kind: SessionKind
    thread_id: str
    created_at: datetime
    updated_at: datetime
    message_count: int
    version: int
    ttl_s: int | None = None


def summary_of(session: ConversationSession) -> SessionSummary:
    return SessionSummary(
        session_id=session.session_id,
        tenant_id=session.tenant_id,
        worker_id=session.worker_id,
        kind=session.kind,
        thread_id=session.thread_id,
        created_at=session.created_at,
        updated_at=session.updated_at,
        message_count=session.archived + len(session.messages),
        version=session.version,
        ttl_s=session.ttl_s,
    )
