"""The one interface both session backends implement, and the rules they share."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from datetime import datetime, timedelta
from typing import Final, Protocol

from genworker.conversation.errors import SessionCorruptError
from genworker.conversation.models import ArchiveChunk, ChatMessage, ConversationSession, SessionSummary

__all__ = [
    "DECODED_CACHE_BYTES",
    "INLINE_SAVE_MESSAGES",
    "DecodedSessions",
    "SessionStore",
    "check_owner",
    "is_expired",
    "join_chunks",
    "newest_first",
]

DECODED_CACHE_BYTES: Final = 32 * 1024 * 1024  # sessions kept decoded, counted by their stored size
# A save re-encodes the whole session, about 2 µs of CPU per message (2.4 ms at 1,100 messages,
# 400 KB); decoding one costs about three times that. Past this many messages both stores do either
# in a worker thread, not on the event loop.
INLINE_SAVE_MESSAGES: Final = 500


class SessionStore(Protocol):
    """Sessions keyed by (tenant_id, session_id); a tenant never sees another tenant's sessions.

    `save` is a compare-and-set: it stores `session` with `version = expected_version + 1` when the
    stored version (0 when absent or expired) equals `expected_version`, and raises
    `ConcurrentUpdateError` otherwise. Only `SessionAggregate` calls it.
    """

    async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None: ...

    async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession: ...

    async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[SessionSummary, ...]: ...

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        """Removes the session and its archive."""
        ...

    async def archive(self, chunk: ArchiveChunk, ttl_s: int | None = None) -> None:
        """Store `chunk` under its `start`, replacing one stored there (the same messages, written
        again after a lost compare-and-set), expiring with the session."""
        ...

    async def archived(self, session: ConversationSession) -> tuple[ChatMessage, ...]:
        """The thread's archived messages, oldest first: `session.archived` of them."""
        ...


def is_expired(session: ConversationSession, now: datetime) -> bool:
    """TTL is sliding: counted from the last save (Redis EXPIRE is reset on every save too)."""
    return session.ttl_s is not None and session.updated_at + timedelta(seconds=session.ttl_s) <= now


def check_owner(session: ConversationSession, tenant_id: str, session_id: str, source: str) -> ConversationSession:
    """A session stored under one tenant's key must say so; anything else is refused, never returned."""
    if session.tenant_id != tenant_id or session.session_id != session_id:
        raise SessionCorruptError(
            source,
            f"holds session {session.session_id!r} of tenant {session.tenant_id!r}, "
            f"expected {session_id!r} of tenant {tenant_id!r}",
        )
    return session


def join_chunks(chunks: Iterable[ArchiveChunk], archived: int, source: str) -> tuple[ChatMessage, ...]:
    """The first `archived` messages from a session's stored chunks. A chunk at or past `archived`
    belongs to a save that did not happen and is left out; a gap is an error naming where."""
    messages: list[ChatMessage] = []
    for chunk in sorted(chunks, key=lambda c: c.start):
        if chunk.start >= archived:
            break
        if chunk.start != len(messages):
            raise SessionCorruptError(source, f"archived messages {len(messages)} to {chunk.start - 1} are missing")
        messages.extend(chunk.messages)
    if len(messages) < archived:
        raise SessionCorruptError(source, f"archived messages {len(messages)} to {archived - 1} are missing")
    return tuple(messages[:archived])


def newest_first(summaries: Iterable[SessionSummary]) -> tuple[SessionSummary, ...]:
    return tuple(sorted(summaries, key=lambda s: (s.updated_at, s.session_id), reverse=True))


class DecodedSessions:
    """Recently stored sessions' bytes, as last read or written by this store, with the session they
    decode to. Bytes that are unchanged are not decoded again: a turn reads its thread's session
    twice (at its start, and for the compare-and-set of its save), and a long thread's session is
    large and costly to decode. Comparing the bytes keeps it exact, whoever wrote
    them. Keys are file paths or Redis keys."""

    def __init__(self, max_bytes: int = DECODED_CACHE_BYTES) -> None:
        self._entries: OrderedDict[Hashable, tuple[bytes, ConversationSession]] = OrderedDict()
        self._bytes = 0
        self._max_bytes = max_bytes
        self._lock = threading.Lock()  # reads also run in worker threads (list, purge, long sessions)

    def get(self, key: Hashable, raw: bytes) -> ConversationSession | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != raw:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: Hashable, raw: bytes, session: ConversationSession) -> None:
        with self._lock:
            self._drop(key)
            if len(raw) > self._max_bytes:
                return
            self._entries[key] = (raw, session)
            self._bytes += len(raw)
            while self._bytes > self._max_bytes:
                self._drop(next(iter(self._entries)))

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= len(entry[0])
