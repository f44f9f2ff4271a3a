"""Session-layer errors: misuse, unreadable persisted state, and lost compare-and-set races."""

from __future__ import annotations

__all__ = [
    "ConcurrentUpdateError",
    "SessionCorruptError",
    "SessionError",
    "SessionNotFoundError",
    "SessionSchemaError",
]


class SessionError(Exception):
    """Base of every session-layer failure."""


class SessionSchemaError(SessionError):
    """A persisted session has a schema_version this runtime cannot read."""

    def __init__(self, source: str, version: object, supported: int) -> None:
        self.source = source
        self.version = version
        super().__init__(
            f"{source}: unsupported session schema_version {version!r} (this runtime reads version {supported})"
        )


class SessionCorruptError(SessionError):
    """A persisted session is not valid JSON or does not match the schema; `source` names the file or key."""

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        super().__init__(f"{source}: unreadable session: {detail}")


class SessionNotFoundError(SessionError):
    def __init__(self, tenant_id: str, session_id: str) -> None:
        self.tenant_id = tenant_id
        self.session_id = session_id
        super().__init__(f"session {session_id!r} of tenant {tenant_id!r} does not exist (deleted or expired)")


class ConcurrentUpdateError(SessionError):
    """The stored version is not the one the writer started from (compare-and-set lost)."""

    def __init__(self, session_id: str, expected: int, actual: int) -> None:
        self.session_id = session_id
        self.expected = expected
        self.actual = actual
        super().__init__(f"session {session_id!r} changed concurrently: expected version {expected}, found {actual}")
