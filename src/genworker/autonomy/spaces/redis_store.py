"""Context spaces in Redis, for runtimes sharing work (the shared profile: REDIS_URL is set).

Keys (tenant and worker ids are validated ids, so they cannot contain ':')::

    {prefix}:{t}:spaces:{w}:space      hash space_id -> the ContextSpace as JSON (the truth)
    {prefix}:{t}:spaces:{w}:seq        counter: one per save
    {prefix}:{t}:spaces:{w}:changed    sorted set space_id -> the seq of its last save
    {prefix}:{t}:spaces:{w}:next       counter: the last space number given (INCR)
    {prefix}:{t}:spaces:{w}:events     hash event_id -> the ContextEvent as JSON (HSETNX: never rewritten)
    {prefix}:{t}:spaces:{w}:lock       redis-py Lock: the worker's spaces change one at a time

A save is one Lua script (the space, the next seq, its place in ``changed``), so a process that read
``changed`` up to a seq has seen every save before it. Every process keeps its own derived SQLite
index of a worker's spaces in a private temporary folder and catches up through `changed_since`
before it reads it. Writers hold the lock while they load, change and save, so two processes routing
facts into one space never lose one another's update. Blocking: call from a worker thread.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final, TypeVar, cast

from pydantic import BaseModel, ValidationError
from redis import Redis

from genworker.autonomy.spaces.errors import SpaceFileError, SpaceNotFound
from genworker.autonomy.spaces.index import INDEX_FILE
from genworker.autonomy.spaces.models import ContextEvent, ContextSpace
from genworker.autonomy.spaces.paths import checked_space_id
from genworker.ids import validate_id

__all__ = ["LOCK_TIMEOUT_S", "RedisEventLog", "RedisSpaceStore"]

log = logging.getLogger("genworker.spaces")
M = TypeVar("M", bound=BaseModel)

LOCK_TIMEOUT_S: Final = 60.0  # a holder that died frees the lock after this; writes inside take milliseconds
_SCAN: Final = 500

# KEYS: space hash, seq, changed. ARGV: space id, JSON. Returns the new seq.
_SAVE: Final = """
local seq = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], seq, ARGV[1])
return seq
"""


def _keys(prefix: str, tenant_id: str, worker_id: str) -> str:
    return ":".join((prefix, validate_id(tenant_id, "tenant id"), "spaces", validate_id(worker_id, "worker id")))


def _parse(model: type[M], raw: bytes, where: str) -> M:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(value)'}: {e['msg']}" for e in exc.errors()[:5])
        raise SpaceFileError(where, problems) from None


class RedisSpaceStore:
    def __init__(self, client: Redis, *, prefix: str = "gw") -> None:
        self._redis = client
        self._prefix = prefix
        self._save = client.register_script(_SAVE)
        self._indexes: Path | None = None  # this process's derived indexes, made on first use

    def _key(self, tenant_id: str, worker_id: str, part: str) -> str:
        return f"{_keys(self._prefix, tenant_id, worker_id)}:{part}"

    def load(self, tenant_id: str, worker_id: str, space_id: str) -> ContextSpace:
        key = self._key(tenant_id, worker_id, "space")
        raw = cast(bytes | None, self._redis.hget(key, checked_space_id(space_id)))
        if raw is None:
            raise SpaceNotFound(space_id)
        space = _parse(ContextSpace, raw, f"redis {key} {space_id}")
        if (space.space_id, space.tenant_id, space.worker_id) != (space_id, tenant_id, worker_id):
            held = f"holds {space.tenant_id}/{space.worker_id}/{space.space_id}"
            raise SpaceFileError(f"redis {key} {space_id}", held)
        return space

    def save(self, space: ContextSpace) -> None:
        t, w = space.tenant_id, space.worker_id
        keys = [self._key(t, w, "space"), self._key(t, w, "seq"), self._key(t, w, "changed")]
        self._save(keys=keys, args=[checked_space_id(space.space_id), space.model_dump_json()])

    def exists(self, tenant_id: str, worker_id: str, space_id: str) -> bool:
        return bool(self._redis.hexists(self._key(tenant_id, worker_id, "space"), checked_space_id(space_id)))

    def all(self, tenant_id: str, worker_id: str) -> Iterator[ContextSpace]:
        key = self._key(tenant_id, worker_id, "space")
        for name, raw in self._redis.hscan_iter(key, count=_SCAN):
            try:
                yield _parse(ContextSpace, raw, f"redis {key} {name.decode()}")
            except SpaceFileError as exc:
                log.error("[Spaces] skipped: %s", exc)

    def has_spaces(self, tenant_id: str, worker_id: str) -> bool:
        return bool(self._redis.exists(self._key(tenant_id, worker_id, "next")))

    def next_id(self, tenant_id: str, worker_id: str) -> str:
        return f"SPACE_{int(self._redis.incr(self._key(tenant_id, worker_id, 'next')))}"

    def locked(self, tenant_id: str, worker_id: str) -> contextlib.AbstractContextManager[None]:
        key = self._key(tenant_id, worker_id, "lock")
        lock = self._redis.lock(key, timeout=LOCK_TIMEOUT_S, blocking_timeout=LOCK_TIMEOUT_S)
        return cast(contextlib.AbstractContextManager[None], lock)

    def index_path(self, tenant_id: str, worker_id: str) -> Path:
        if self._indexes is None:
            self._indexes = Path(tempfile.mkdtemp(prefix="genworker-spaces-"))
        folder = self._indexes / validate_id(tenant_id, "tenant id") / validate_id(worker_id, "worker id")
        return folder / INDEX_FILE

    def changed_since(self, tenant_id: str, worker_id: str, mark: int | None) -> tuple[int, list[str]] | None:
        """Read the seq first: a save after it is found again next time (a space put twice is harmless)."""
        seq = int(cast(bytes | None, self._redis.get(self._key(tenant_id, worker_id, "seq"))) or 0)
        if mark is None or seq <= mark:
            return seq, []
        changed = cast(
            builtins.list[bytes],
            self._redis.zrangebyscore(self._key(tenant_id, worker_id, "changed"), f"({mark}", seq),
        )
        return seq, [c.decode() for c in changed]

    def close(self) -> None:
        if self._indexes is not None:
            shutil.rmtree(self._indexes, ignore_errors=True)
            self._indexes = None


class RedisEventLog:
    """The event log in Redis: each event once (a retried append is a no-op), never rewritten."""

    def __init__(self, client: Redis, *, prefix: str = "gw") -> None:
        self._redis = client
        self._prefix = prefix

    def _key(self, tenant_id: str, worker_id: str) -> str:
        return f"{_keys(self._prefix, tenant_id, worker_id)}:events"

    def append(self, event: ContextEvent) -> None:
        self._redis.hsetnx(self._key(event.tenant_id, event.worker_id), event.event_id, event.model_dump_json())

    def read(
        self, tenant_id: str, worker_id: str, event_ids: Iterable[str] | None = None
    ) -> builtins.list[ContextEvent]:
        key = self._key(tenant_id, worker_id)
        if event_ids is None:
            raws = cast(builtins.list[bytes], self._redis.hvals(key))
        else:
            ids = list(dict.fromkeys(event_ids))
            raws = [r for r in cast(builtins.list[bytes | None], self._redis.hmget(key, ids) if ids else []) if r]
        events = []
        for raw in raws:
            try:
                events.append(_parse(ContextEvent, raw, f"redis {key}"))
            except SpaceFileError as exc:
                log.warning("[Spaces] unreadable event skipped: %s", exc)
        return sorted(events, key=lambda e: (e.recorded_at, e.event_id))
