"""SessionManager: thread and main session lifecycle for the chat route, channels and heartbeat."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any
from uuid import uuid4

from genworker.conversation.aggregate import MAX_LIVE_MESSAGES, SessionAggregate
from genworker.conversation.errors import ConcurrentUpdateError
from genworker.conversation.models import (
    MAIN_THREAD_ID,
    ChatMessage,
    ConversationSession,
    SessionKind,
    SessionSummary,
    ToolMessage,
    session_id_for,
    utc_now,
)
from genworker.conversation.store import SessionStore
from genworker.ids import validate_id

__all__ = ["SessionManager", "recent_messages"]


def _new_thread_id() -> str:
    return uuid4().hex


class SessionManager:
    def __init__(
        self,
        store: SessionStore,
        *,
        clock: Callable[[], datetime] = utc_now,
        new_thread_id: Callable[[], str] = _new_thread_id,
        max_attempts: int = 32,
        max_live_messages: int = MAX_LIVE_MESSAGES,
    ) -> None:
        self.store = store
        self.aggregate = SessionAggregate(
            store, clock=clock, max_attempts=max_attempts, max_live_messages=max_live_messages
        )
        self._clock = clock
        self._new_thread_id = new_thread_id

    async def get_or_create_thread(
        self,
        tenant_id: str,
        worker_id: str,
        thread_id: str | None = None,
        *,
        ttl_s: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ConversationSession:
        """The thread's session, created (with `ttl_s` and `metadata`) when it does not exist yet."""
        thread = thread_id if thread_id is not None else self._new_thread_id()
        return await self._get_or_create(self._fresh(tenant_id, "thread", worker_id, thread, ttl_s, metadata))

    def new_thread_id(self) -> str:
        return self._new_thread_id()

    def unsaved_thread(
        self, tenant_id: str, worker_id: str, thread_id: str, *, ttl_s: int | None = None
    ) -> ConversationSession:
        """A new thread's session, not yet stored: its first `append` creates it (one file write for
        a new conversation's first turn instead of two). For a thread id nobody can know yet."""
        return self._fresh(tenant_id, "thread", worker_id, thread_id, ttl_s, None)

    async def main_session(self, tenant_id: str, worker_id: str) -> ConversationSession:
        return await self._get_or_create(self._fresh(tenant_id, "main", worker_id, MAIN_THREAD_ID, None, None))

    async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None:
        return await self.store.get(tenant_id, session_id)

    async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[SessionSummary, ...]:
        return await self.store.list(tenant_id, worker_id)

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        return await self.store.delete(tenant_id, session_id)

    async def all_messages(self, session: ConversationSession) -> tuple[ChatMessage, ...]:
        """The whole thread: its archived messages, then the session's own."""
        return (*await self.store.archived(session), *session.messages)

    async def append(self, session: ConversationSession, *messages: ChatMessage) -> ConversationSession:
        return await self.aggregate.append(session, *messages)

    async def set_metadata(
        self, session: ConversationSession, updates: Mapping[str, Any], *, remove: tuple[str, ...] = ()
    ) -> ConversationSession:
        return await self.aggregate.set_metadata(session, updates, remove=remove)

    async def set_ttl(self, session: ConversationSession, ttl_s: int | None) -> ConversationSession:
        return await self.aggregate.set_ttl(session, ttl_s)

    @staticmethod
    def history(session: ConversationSession, limit: int | None = None) -> tuple[ChatMessage, ...]:
        return recent_messages(session.messages, limit)

    async def _get_or_create(self, fresh: ConversationSession) -> ConversationSession:
        """The stored session of `fresh`'s id, else `fresh`, stored now."""
        existing = await self.store.get(fresh.tenant_id, fresh.session_id)
        if existing is not None:
            return existing
        try:
            return await self.aggregate.create(fresh)
        except ConcurrentUpdateError:
            existing = await self.store.get(fresh.tenant_id, fresh.session_id)
            if existing is None:
                raise
            return existing

    def _fresh(
        self,
        tenant_id: str,
        kind: SessionKind,
        worker_id: str,
        thread_id: str,
        ttl_s: int | None,
        metadata: Mapping[str, Any] | None,
    ) -> ConversationSession:
        validate_id(tenant_id, "tenant id")
        now = self._clock()
        return ConversationSession(
            session_id=session_id_for(kind, worker_id, thread_id),
            tenant_id=tenant_id,
            worker_id=worker_id,
            kind=kind,
            thread_id=thread_id,
            created_at=now,
            updated_at=now,
            ttl_s=ttl_s,
            metadata=metadata or {},
        )


def recent_messages(messages: tuple[ChatMessage, ...], limit: int | None) -> tuple[ChatMessage, ...]:
    """The last `limit` messages, without leading tool results whose assistant call was cut off
    (providers reject a tool message that does not follow its call)."""
    if limit is None:
        window = messages
    elif limit <= 0:
        return ()
    else:
        window = messages[-limit:]
    start = 0
    while start < len(window) and isinstance(window[start], ToolMessage):
        start += 1
    return window[start:]
