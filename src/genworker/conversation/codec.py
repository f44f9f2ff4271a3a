"""The one way a session becomes bytes and back: a single TypeAdapter, schema_version checked first."""

from __future__ import annotations

import json
from typing import Final

from pydantic import TypeAdapter, ValidationError

from genworker.conversation.errors import SessionCorruptError, SessionSchemaError
from genworker.conversation.models import SCHEMA_VERSION, ConversationSession

__all__ = ["SESSION_ADAPTER", "decode_session", "encode_session"]

SESSION_ADAPTER: Final = TypeAdapter(ConversationSession)


def encode_session(session: ConversationSession, *, indent: int | None = None) -> bytes:
    return SESSION_ADAPTER.dump_json(session, indent=indent)


def decode_session(raw: bytes | str, source: str) -> ConversationSession:
    """Parse a persisted session; `source` (a file path or Redis key) names it in every error."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SessionCorruptError(source, f"not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise SessionCorruptError(source, f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise SessionSchemaError(source, version, SCHEMA_VERSION)
    try:
        return SESSION_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise SessionCorruptError(source, _describe(exc)) from exc


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "<document>"
        parts.append(f"{where}: {error['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
