"""Seen request signatures that cover no body (DingTalk's `timestamp` + `sign`): a replay is refused.

DingTalk signs only the timestamp, so a captured `(timestamp, sign)` pair would authenticate any
body (with a new `msgId`) for as long as the timestamp is accepted. Each accepted pair is kept
until its timestamp leaves the acceptance window, with the event id it came with: the same pair
with the same event id is the platform retrying (the dedupe store answers it), with another event
id a replay. `FileReplayGuard` keeps one small file per pair under the worker's
`runtime/channels/replay/` (created exclusively, `schema_version` 1, expired files pruned as new
ones arrive); `RedisReplayGuard` uses `SET NX` with the same expiry for workers served by several
processes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import redis.asyncio as aioredis

from genworker.channels.base import ReplayKey
from genworker.fsutil import create_exclusive, file_lock, write_atomic
from genworker.ids import safe_join

__all__ = ["FileReplayGuard", "RedisReplayGuard", "ReplayGuard"]

log = logging.getLogger("genworker.channels")

SCHEMA_VERSION = 1


class ReplayGuard(Protocol):
    async def first_use(self, tenant_id: str, worker_id: str, key: ReplayKey, event_id: str) -> bool:
        """False when `key` was already used, within its window, by another event than `event_id`."""
        ...

    async def forget(self, tenant_id: str, worker_id: str, key: ReplayKey, event_id: str) -> None:
        """Drop `key` (if `event_id` holds it): the event was not stored, the platform's retry must pass."""
        ...


def _digest(key: ReplayKey) -> str:
    return hashlib.sha256(key.value.encode("utf-8")).hexdigest()


class FileReplayGuard:
    def __init__(self, workspace_root: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.root = workspace_root
        self._clock = clock

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "channels" / "replay"

    def _path(self, tenant_id: str, worker_id: str, key: ReplayKey) -> Path:
        digest = _digest(key)
        return self.folder(tenant_id, worker_id) / digest[:2] / f"{digest}.json"

    async def first_use(self, tenant_id: str, worker_id: str, key: ReplayKey, event_id: str) -> bool:
        return await asyncio.to_thread(self._first_use, self._path(tenant_id, worker_id, key), key, event_id)

    async def forget(self, tenant_id: str, worker_id: str, key: ReplayKey, event_id: str) -> None:
        await asyncio.to_thread(self._forget, self._path(tenant_id, worker_id, key), event_id)

    def _first_use(self, path: Path, key: ReplayKey, event_id: str) -> bool:
        record = json.dumps(
            {"schema_version": SCHEMA_VERSION, "event_id": event_id, "expires_at": key.expires_at}
        ).encode("utf-8")
        now = self._clock()
        path.parent.mkdir(parents=True, exist_ok=True)
        if create_exclusive(path, record):
            self._prune(path.parent, now)
            return True
        with file_lock(path.parent / ".lock"):
            seen = _read(path)
            if seen is None or seen[1] <= now:  # gone, expired or unreadable: this use is the first
                write_atomic(path, record)
                return True
            return seen[0] == event_id

    def _forget(self, path: Path, event_id: str) -> None:
        with file_lock(path.parent / ".lock"):
            seen = _read(path)
            if seen is not None and seen[0] == event_id:
                path.unlink(missing_ok=True)

    def _prune(self, folder: Path, now: float) -> None:
        """Expired pairs of this subfolder (1/256 of them): the folder stays about one window's size."""
        for other in folder.glob("*.json"):
            seen = _read(other)
            if seen is not None and seen[1] <= now:
                other.unlink(missing_ok=True)


def _read(path: Path) -> tuple[str, float] | None:
    try:
        data = json.loads(path.read_bytes())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"unknown schema_version {data.get('schema_version')!r}")
        return str(data["event_id"]), float(data["expires_at"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("[Channels] unreadable replay record %s replaced: %s", path, exc)
        return None


class RedisReplayGuard:
    PREFIX = "genworker:channels:replay"

    def __init__(self, client: aioredis.Redis, *, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self._clock = clock

    def _key(self, tenant_id: str, worker_id: str, key: ReplayKey) -> str:
        return f"{self.PREFIX}:{tenant_id}:{worker_id}:{_digest(key)}"

    async def first_use(self, tenant_id: str, worker_id: str, key: ReplayKey, event_id: str) -> bool:
        ttl_ms = max(1, int((key.expires_at - self._clock()) * 1000))
        name = self._key(tenant_id, worker_id, key)
        if await self.client.set(name, event_id, nx=True, px=ttl_ms):
            return True
        seen = await self.client.get(name)
        if seen is None:  # expired between the two calls
            return bool(await self.client.set(name, event_id, nx=True, px=ttl_ms))
        return _text(seen) == event_id

    async def forget(self, tenant_id: str, worker_id: str, key: ReplayKey, event_id: str) -> None:
        name = self._key(tenant_id, worker_id, key)
        seen = await self.client.get(name)
        if seen is not None and _text(seen) == event_id:
            await self.client.delete(name)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
