"""SessionAggregate: the only code that changes a stored session.

Every change is a pure function of the current session. It is applied and saved with a
compare-and-set; when another writer got there first, the aggregate reloads the session and applies
the same change again, so concurrent appends never lose a message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from genworker.conversation.errors import ConcurrentUpdateError, SessionNotFoundError
from genworker.conversation.models import ChatMessage, ConversationSession, utc_now
from genworker.conversation.store import SessionStore

__all__ = ["Change", "SessionAggregate"]

Change = Callable[[ConversationSession], ConversationSession]


class SessionAggregate:
    def __init__(self, store: SessionStore, *, clock: Callable[[], datetime] = utc_now, max_attempts: int = 32) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._store = store
        self._clock = clock
        self._max_attempts = max_attempts

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
