"""The one way a session (or an archived chunk of one) becomes bytes and back: a TypeAdapter each,
schema_version checked first."""

from __future__ import annotations

import json
from typing import Final, TypeVar

from pydantic import TypeAdapter, ValidationError

from genworker.conversation.errors import SessionCorruptError, SessionSchemaError
from genworker.conversation.models import SCHEMA_VERSION, ArchiveChunk, ConversationSession

__all__ = ["SESSION_ADAPTER", "decode_chunk", "decode_session", "encode_chunk", "encode_session"]

SESSION_ADAPTER: Final = TypeAdapter(ConversationSession)
CHUNK_ADAPTER: Final = TypeAdapter(ArchiveChunk)

_T = TypeVar("_T")


def encode_session(session: ConversationSession, *, indent: int | None = None) -> bytes:
    return SESSION_ADAPTER.dump_json(session, indent=indent)


def decode_session(raw: bytes | str, source: str) -> ConversationSession:
    """Parse a persisted session; `source` (a file path or Redis key) names it in every error."""
    return _decode(SESSION_ADAPTER, raw, source)


def encode_chunk(chunk: ArchiveChunk) -> bytes:
    return CHUNK_ADAPTER.dump_json(chunk)


def decode_chunk(raw: bytes | str, source: str) -> ArchiveChunk:
    return _decode(CHUNK_ADAPTER, raw, source)


def _decode(adapter: TypeAdapter[_T], raw: bytes | str, source: str) -> _T:
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
        return adapter.validate_python(data)
    except ValidationError as exc:
        raise SessionCorruptError(source, _describe(exc)) from exc


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "<document>"
        parts.append(f"{where}: {error['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
