"""The one interface both session backends implement, and the rules they share."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Protocol

from genworker.conversation.errors import SessionCorruptError
from genworker.conversation.models import ConversationSession, SessionSummary

__all__ = ["SessionStore", "check_owner", "is_expired", "newest_first"]


class SessionStore(Protocol):
    """Sessions keyed by (tenant_id, session_id); a tenant never sees another tenant's sessions.

    `save` is a compare-and-set: it stores `session` with `version = expected_version + 1` when the
    stored version (0 when absent or expired) equals `expected_version`, and raises
    `ConcurrentUpdateError` otherwise. Only `SessionAggregate` calls it.
    """

    async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None: ...

    async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession: ...

    async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[SessionSummary, ...]: ...

    async def delete(self, tenant_id: str, session_id: str) -> bool: ...


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


def newest_first(summaries: Iterable[SessionSummary]) -> tuple[SessionSummary, ...]:
    return tuple(sorted(summaries, key=lambda s: (s.updated_at, s.session_id), reverse=True))
