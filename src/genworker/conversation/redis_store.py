"""Sessions in Redis: one hash per session, one index per tenant, compare-and-set in a Lua script.

Keys (tenant ids are validated ids, so they cannot contain ':')::

    {prefix}:{tenant_id}:session:{session_id}   hash: schema_version, version, session (JSON), summary fields
    {prefix}:{tenant_id}:archive:{session_id}   hash: a long thread's oldest messages, one chunk per start
    {prefix}:{tenant_id}:sessions               sorted set of session ids, scored by updated_at

A session with `ttl_s` gets PEXPIRE on every save (sliding expiry); index entries whose hash has
expired are dropped when `list` finds them.

A session whose stored bytes are unchanged since this store last read or wrote them is not decoded
again (`DecodedSessions`), and a long one is encoded and decoded in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Final, TypeVar, cast

from redis.asyncio import Redis

from genworker.conversation.codec import decode_chunk, decode_session, encode_chunk, encode_session
from genworker.conversation.errors import ConcurrentUpdateError, SessionCorruptError, SessionSchemaError
from genworker.conversation.models import (
    SCHEMA_VERSION,
    ArchiveChunk,
    ChatMessage,
    ConversationSession,
    SessionKind,
    SessionSummary,
)
from genworker.conversation.store import INLINE_SAVE_MESSAGES, DecodedSessions, check_owner, join_chunks, newest_first
from genworker.ids import validate_id

__all__ = ["RedisSessionStore"]

log = logging.getLogger(__name__)

# KEYS: session hash, tenant index, archive hash. ARGV: expected version, ttl ms (0: none), score,
# session id, field/value pairs. The archive expires with the session.
_SAVE: Final = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return current end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
else
  redis.call('PERSIST', KEYS[3])
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return -1
"""

# KEYS: session hash, tenant index. ARGV: session id. Drops the index entry only if the hash is really gone.
_PRUNE: Final = """
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('ZREM', KEYS[2], ARGV[1]) end
return 0
"""

# A stored session this large (about 500 messages) is decoded in a worker thread.
INLINE_DECODE_BYTES: Final = 200_000

_T = TypeVar("_T")

_KINDS: Final[dict[str, SessionKind]] = {"thread": "thread", "main": "main"}

_SUMMARY_FIELDS: Final = (
    "schema_version",
    "version",
    "worker_id",
    "kind",
    "thread_id",
    "created_at",
    "updated_at",
    "message_count",
    "ttl_s",
)


async def _off_loop_if(long: bool, work: Callable[..., _T], *args: Any) -> _T:
    """`work(*args)` in a worker thread when `long`, on the event loop otherwise."""
    return await asyncio.to_thread(work, *args) if long else work(*args)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisSessionStore:
    def __init__(self, client: Redis | str, *, prefix: str = "genworker") -> None:
        self._owns_client = isinstance(client, str)
        self._client: Redis = Redis.from_url(client) if isinstance(client, str) else client
        self._prefix = prefix
        self._save_script = self._client.register_script(_SAVE)
        self._prune_script = self._client.register_script(_PRUNE)
        self._decoded = DecodedSessions()

    async def aclose(self) -> None:
        """Close the client if this store created it from a URL."""
        if self._owns_client:
            await self._client.aclose()

    def key_of(self, tenant_id: str, session_id: str) -> str:
        return f"{self._tenant(tenant_id)}:session:{validate_id(session_id, 'session id')}"

    async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None:
        key = self.key_of(tenant_id, session_id)
        found: bytes | str | None = await self._client.hget(key, "session")
        if found is None:
            self._decoded.forget(key)
            return None
        raw = found.encode() if isinstance(found, str) else found  # a client with decode_responses
        source = f"redis key {key}"
        session = self._decoded.get(key, raw)
        if session is None:
            session = await _off_loop_if(len(raw) > INLINE_DECODE_BYTES, decode_session, raw, source)
            self._decoded.put(key, raw, session)
        return check_owner(session, tenant_id, session_id, source)

    async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession:
        key = self.key_of(session.tenant_id, session.session_id)
        stored = replace(session, version=expected_version + 1)
        encoded = await _off_loop_if(len(stored.messages) > INLINE_SAVE_MESSAGES, encode_session, stored)
        fields = _fields(stored, encoded)
        ttl_ms = stored.ttl_s * 1000 if stored.ttl_s else 0
        args: list[Any] = [expected_version, ttl_ms, stored.updated_at.timestamp(), stored.session_id]
        for name, value in fields.items():
            args += [name, value]
        keys = [key, self._index(session.tenant_id), self._archive_key(session.tenant_id, session.session_id)]
        result = int(await self._save_script(keys=keys, args=args))
        if result != -1:
            raise ConcurrentUpdateError(session.session_id, expected_version, result)
        self._decoded.put(key, encoded, stored)  # what decoding `encoded` gives (the codec round-trips)
        return stored

    async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[SessionSummary, ...]:
        if worker_id is not None:
            validate_id(worker_id, "worker id")
        index = self._index(tenant_id)
        members = [_text(m) for m in cast("list[bytes | str]", await self._client.zrange(index, 0, -1))]
        async with self._client.pipeline(transaction=False) as pipe:
            for session_id in members:
                pipe.hmget(self.key_of(tenant_id, session_id), list(_SUMMARY_FIELDS))
            rows = await pipe.execute()
        found = []
        for session_id, row in zip(members, rows, strict=True):
            key = self.key_of(tenant_id, session_id)
            if all(v is None for v in row):
                await self._prune_script(keys=[key, index], args=[session_id])
                continue
            try:
                summary = _summary(tenant_id, session_id, dict(zip(_SUMMARY_FIELDS, row, strict=True)), key)
            except (SessionCorruptError, SessionSchemaError) as exc:
                log.error("skipping unreadable session: %s", exc)
                continue
            if worker_id is None or summary.worker_id == worker_id:
                found.append(summary)
        return newest_first(found)

    async def archive(self, chunk: ArchiveChunk, ttl_s: int | None = None) -> None:
        key = self._archive_key(chunk.tenant_id, chunk.session_id)
        data = await asyncio.to_thread(encode_chunk, chunk)  # hundreds of messages
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hset(key, f"{chunk.start:010d}", data)
            if ttl_s:
                pipe.expire(key, ttl_s)
            await pipe.execute()

    async def archived(self, session: ConversationSession) -> tuple[ChatMessage, ...]:
        if not session.archived:
            return ()
        key = self._archive_key(session.tenant_id, session.session_id)
        stored: dict[bytes | str, bytes | str] = await self._client.hgetall(key)
        source = f"redis key {key}"

        def decode() -> tuple[ChatMessage, ...]:
            chunks = [decode_chunk(raw, f"{source} field {_text(start)}") for start, raw in stored.items()]
            return join_chunks(chunks, session.archived, source)

        return await asyncio.to_thread(decode)

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        key = self.key_of(tenant_id, session_id)
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.zrem(self._index(tenant_id), session_id)
            pipe.delete(self._archive_key(tenant_id, session_id))
            deleted, _, _ = await pipe.execute()
        self._decoded.forget(key)
        return bool(deleted)

    def _tenant(self, tenant_id: str) -> str:
        return f"{self._prefix}:{validate_id(tenant_id, 'tenant id')}"

    def _index(self, tenant_id: str) -> str:
        return f"{self._tenant(tenant_id)}:sessions"

    def _archive_key(self, tenant_id: str, session_id: str) -> str:
        return f"{self._tenant(tenant_id)}:archive:{validate_id(session_id, 'session id')}"


def _fields(session: ConversationSession, encoded: bytes) -> dict[str, str | int | bytes]:
    return {
        "schema_version": session.schema_version,
        "version": session.version,
        "session": encoded,
        "worker_id": session.worker_id,
        "kind": session.kind,
        "thread_id": session.thread_id,
        "created_at": session.created_at.isoformat(),
        "updated_at": session.updated_at.isoformat(),
        "message_count": session.archived + len(session.messages),
        "ttl_s": session.ttl_s or 0,
    }


def _summary(tenant_id: str, session_id: str, row: dict[str, Any], key: str) -> SessionSummary:
    source = f"redis key {key}"
    values = {name: _text(v) if v is not None else None for name, v in row.items()}
    if values["schema_version"] != str(SCHEMA_VERSION):
        raise SessionSchemaError(source, values["schema_version"], SCHEMA_VERSION)
    try:
        kind = _KINDS[str(values["kind"])]
        return SessionSummary(
            session_id=session_id,
            tenant_id=tenant_id,
            worker_id=str(values["worker_id"]),
            kind=kind,
            thread_id=str(values["thread_id"]),
            created_at=datetime.fromisoformat(str(values["created_at"])),
            updated_at=datetime.fromisoformat(str(values["updated_at"])),
            message_count=int(str(values["message_count"])),
            version=int(str(values["version"])),
            ttl_s=int(str(values["ttl_s"])) or None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionCorruptError(source, f"bad summary fields ({exc})") from exc
