"""Seen platform event ids: claimed before an event is accepted, so a retry is never processed twice.

`FileDedupeStore` keeps one small file per claim under the worker's runtime folder
(`runtime/channels/dedupe/`), created exclusively so two racing deliveries cannot both win;
`RedisDedupeStore` uses `SET NX EX` for workers served by several processes. A claim lives
`ttl_s` (default 48 h, never under 24 h): longer than Feishu's and WeCom's retry windows.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import redis.asyncio as aioredis

from genworker.fsutil import create_exclusive, file_lock, write_atomic
from genworker.ids import safe_join

__all__ = ["DEFAULT_TTL_S", "MIN_TTL_S", "DedupeStore", "FileDedupeStore", "RedisDedupeStore"]

SCHEMA_VERSION = 1
MIN_TTL_S = 24 * 3600.0
DEFAULT_TTL_S = 48 * 3600.0


class DedupeStore(Protocol):
    async def claim(self, tenant_id: str, worker_id: str, key: str) -> bool:
        """True the first time `key` is seen for the worker within the TTL; False for a repeat."""
        ...

    async def release(self, tenant_id: str, worker_id: str, key: str) -> None:
        """Forget a claim whose event could not be accepted, so the platform's retry is taken."""
        ...


def _check_ttl(ttl_s: float) -> float:
    if ttl_s < MIN_TTL_S:
        raise ValueError(f"dedupe ttl_s must be at least {MIN_TTL_S:.0f} s (platforms retry for hours), got {ttl_s}")
    return ttl_s


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class FileDedupeStore:
    def __init__(
        self, workspace_root: Path, *, ttl_s: float = DEFAULT_TTL_S, clock: Callable[[], float] = time.time
    ) -> None:
        self.root = workspace_root
        self.ttl_s = _check_ttl(ttl_s)
        self._clock = clock

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "channels" / "dedupe"

    def _path(self, tenant_id: str, worker_id: str, key: str) -> Path:
        digest = _digest(key)
        return self.folder(tenant_id, worker_id) / digest[:2] / f"{digest}.json"

    async def claim(self, tenant_id: str, worker_id: str, key: str) -> bool:
        return await asyncio.to_thread(self._claim, tenant_id, worker_id, key)

    async def release(self, tenant_id: str, worker_id: str, key: str) -> None:
        await asyncio.to_thread(self._path(tenant_id, worker_id, key).unlink, missing_ok=True)

    def _record(self, key: str, now: float) -> bytes:
        return json.dumps(
            {"schema_version": SCHEMA_VERSION, "key": key, "claimed_at": now, "expires_at": now + self.ttl_s}
        ).encode()

    def _claim(self, tenant_id: str, worker_id: str, key: str) -> bool:
        path = self._path(tenant_id, worker_id, key)
        now = self._clock()
        path.parent.mkdir(parents=True, exist_ok=True)
        if create_exclusive(path, self._record(key, now)):
            return True
        with file_lock(path.parent / ".lock"):  # an expired claim is taken over by one claimant only
            if self._expires_at(path) > now:
                return False
            write_atomic(path, self._record(key, now))
            return True

    def _expires_at(self, path: Path) -> float:
        try:
            data = json.loads(path.read_bytes())
            return float(data["expires_at"]) if data.get("schema_version") == SCHEMA_VERSION else 0.0
        except FileNotFoundError:
            return 0.0
        except (ValueError, KeyError, TypeError):
            return float("inf")  # unreadable: keep treating the key as seen rather than reprocess

    def prune(self, tenant_id: str, worker_id: str) -> int:
        """Delete expired claims; returns how many. Blocking: call from a thread."""
        now, removed = self._clock(), 0
        for path in self.folder(tenant_id, worker_id).glob("*/*.json"):
            if self._expires_at(path) <= now:
                path.unlink(missing_ok=True)
                removed += 1
        return removed


class RedisDedupeStore:
    PREFIX = "genworker:channels:dedupe"

    def __init__(self, client: aioredis.Redis, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self.client = client
        self.ttl_s = _check_ttl(ttl_s)

    def _key(self, tenant_id: str, worker_id: str, key: str) -> str:
        return f"{self.PREFIX}:{tenant_id}:{worker_id}:{_digest(key)}"

    async def claim(self, tenant_id: str, worker_id: str, key: str) -> bool:
        return bool(await self.client.set(self._key(tenant_id, worker_id, key), "1", nx=True, ex=int(self.ttl_s)))

    async def release(self, tenant_id: str, worker_id: str, key: str) -> None:
        await self.client.delete(self._key(tenant_id, worker_id, key))
