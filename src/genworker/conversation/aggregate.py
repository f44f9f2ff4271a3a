"""SessionAggregate: the only code that changes a stored session.

Every change is a pure function of the current session. It is applied and saved with a
compare-and-set; when another writer got there first, the aggregate reloads the session and applies
the same change again, so concurrent appends never lose a message.

A thread keeps at most `max_live_messages` in its session: past that, its oldest stored messages go
to the store's archive in chunks of `ARCHIVE_CHUNK`, before the save that drops them. A thread's
messages are only ever appended, so the chunk at a given start always holds the same messages,
whoever writes it and however often (a save that loses its compare-and-set wrote it for nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Final

from genworker.conversation.errors import ConcurrentUpdateError, SessionNotFoundError
from genworker.conversation.models import ArchiveChunk, ChatMessage, ConversationSession, utc_now
from genworker.conversation.store import SessionStore

__all__ = ["ARCHIVE_CHUNK", "MAX_LIVE_MESSAGES", "Change", "SessionAggregate"]

Change = Callable[[ConversationSession], ConversationSession]

# A session is rewritten whole on every save (about 2.4 ms of encoding per 1,000 messages, and the
# file or Redis value with it) and compaction keeps only the newest turns in a prompt anyway.
MAX_LIVE_MESSAGES: Final = 1_000
ARCHIVE_CHUNK: Final = 500  # fixed: every process must cut a thread at the same places


class SessionAggregate:
    def __init__(
        self,
        store: SessionStore,
        *,
        clock: Callable[[], datetime] = utc_now,
        max_attempts: int = 32,
        max_live_messages: int = MAX_LIVE_MESSAGES,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if max_live_messages < ARCHIVE_CHUNK:
            raise ValueError(f"max_live_messages must be at least {ARCHIVE_CHUNK}, got {max_live_messages}")
        self._store = store
        self._clock = clock
        self._max_attempts = max_attempts
        self._max_live = max_live_messages

    async def create(self, session: ConversationSession) -> ConversationSession:
        """Store a new session; `ConcurrentUpdateError` when one with that id already exists."""
        return await self._store.save(replace(session, version=0), expected_version=0)

    async def append(self, session: ConversationSession, *messages: ChatMessage) -> ConversationSession:
        return await self.apply(session, lambda s: replace(s, messages=(*s.messages, *messages)))

    async def set_metadata(
        self, session: ConversationSession, updates: Mapping[str, Any], *, remove: Iterable[str] = ()
    ) -> ConversationSession:
        """Merge `updates` into the metadata and drop the keys in `remove`."""
        dropped = frozenset(remove)

        def change(s: ConversationSession) -> ConversationSession:
            merged = {k: v for k, v in s.metadata.items() if k not in dropped}
            return replace(s, metadata={**merged, **updates})

        return await self.apply(session, change)

    async def set_ttl(self, session: ConversationSession, ttl_s: int | None) -> ConversationSession:
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive or None, got {ttl_s}")
        return await self.apply(session, lambda s: replace(s, ttl_s=ttl_s))

    async def apply(self, session: ConversationSession, change: Change) -> ConversationSession:
        """Apply `change` to the latest stored state, retrying the compare-and-set on conflict.

        `session` is the caller's copy: a never-saved session (version 0) is created; a saved one
        that has since been deleted or has expired raises `SessionNotFoundError`.
        """
        current = session
        conflict: ConcurrentUpdateError | None = None
        for _ in range(self._max_attempts):
            updated = replace(change(current), updated_at=self._clock())
            if (updated.tenant_id, updated.session_id) != (current.tenant_id, current.session_id):
                raise ValueError("a session change may not alter the tenant or the session id")
            updated = await self._archive_oldest(current, updated)
            try:
                return await self._store.save(updated, expected_version=current.version)
            except ConcurrentUpdateError as exc:
                conflict = exc
            latest = await self._store.get(session.tenant_id, session.session_id)
            if latest is None:
                raise SessionNotFoundError(session.tenant_id, session.session_id) from conflict
            current = latest
        assert conflict is not None
        raise conflict

    async def _archive_oldest(self, current: ConversationSession, updated: ConversationSession) -> ConversationSession:
        """`updated` with its oldest chunks archived while it holds more than `max_live_messages`.
        A chunk is cut from `current`'s messages only (stored ones, at fixed places in the thread),
        and only when `updated` still begins with them."""
        if updated.kind != "thread" or updated.archived != current.archived:
            return updated
        cut = 0
        while len(updated.messages) - cut > self._max_live and cut + ARCHIVE_CHUNK <= len(current.messages):
            chunk = current.messages[cut : cut + ARCHIVE_CHUNK]
            if any(a is not b for a, b in zip(chunk, updated.messages[cut : cut + ARCHIVE_CHUNK], strict=True)):
                break  # the change rewrote history (no thread change does): keep it whole
            start = current.archived + cut
            await self._store.archive(
                ArchiveChunk(tenant_id=current.tenant_id, session_id=current.session_id, start=start, messages=chunk),
                updated.ttl_s,
            )
            cut += ARCHIVE_CHUNK
        if not cut:
            return updated
        return replace(updated, messages=updated.messages[cut:], archived=updated.archived + cut)
