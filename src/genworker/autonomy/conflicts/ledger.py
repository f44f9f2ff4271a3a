"""ResourceLedger: per resource key, a lock and what the arbiter knows (the version last committed,
the plans claiming it). Two backends: files under the tenant (`flock`, one process or several on one
host's workspace) and Redis (the shared profile: several hosts).

Every change is made by a caller holding the key's lock. The lock is exclusive across processes;
a Redis lock expires after its TTL unless its holder renews it (it does, while held), so a holder
that dies frees the resource within `lock_ttl_seconds`; a file lock is freed when its process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import redis.asyncio as aioredis

from genworker.autonomy.conflicts.errors import ResourceBusy
from genworker.autonomy.conflicts.models import EffectRecord, ResourceState
from genworker.fsutil import write_atomic
from genworker.ids import safe_join

__all__ = ["REDIS_PREFIX", "FileLedger", "RedisLedger", "ResourceLedger"]

REDIS_PREFIX = "genworker:conflicts:"
_POLL_FIRST_S, _POLL_MAX_S = 0.005, 0.1


class ResourceLedger(Protocol):
    def lock(
        self, tenant_id: str, key: str, ttl_s: float, wait_s: float
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold `key` exclusively; ResourceBusy when it is not free within `wait_s`."""
        ...

    async def state(self, tenant_id: str, key: str) -> ResourceState: ...

    async def claim(self, effect: EffectRecord) -> None:
        """Add or replace `effect.plan_id`'s claim on `effect.resource_key`."""
        ...

    async def unclaim(self, tenant_id: str, key: str, plan_id: str) -> None: ...

    async def committed(
        self, tenant_id: str, key: str, version: str, plan_id: str, operation: str, claim: EffectRecord | None = None
    ) -> None:
        """Record the version committed (and `claim`, the committing plan's claim, in the same write)."""
        ...


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _backoff(delay: float) -> float:
    return min(delay * 2, _POLL_MAX_S)


class FileLedger:
    """`tenants/{t}/runtime/conflicts/resources/{sha}.json`, locked by `flock` on `{sha}.lock`."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def _folder(self, tenant_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id) / "runtime" / "conflicts" / "resources"

    @contextlib.asynccontextmanager
    async def lock(self, tenant_id: str, key: str, ttl_s: float, wait_s: float) -> AsyncIterator[None]:
        path = self._folder(tenant_id) / f"{_digest(key)}.lock"
        fd = await asyncio.to_thread(_open_lock, path)
        try:
            loop = asyncio.get_running_loop()
            deadline, delay = loop.time() + wait_s, _POLL_FIRST_S
            while not _try_flock(fd):
                if loop.time() >= deadline:
                    raise ResourceBusy(f"{key} is being changed by another plan (waited {wait_s:g} s)")
                await asyncio.sleep(delay)
                delay = _backoff(delay)
            yield
        finally:
            os.close(fd)  # releases the flock

    async def state(self, tenant_id: str, key: str) -> ResourceState:
        data = await asyncio.to_thread(self._read, tenant_id, key)
        claims = {p: EffectRecord.from_json(e) for p, e in data.get("claims", {}).items()}
        return ResourceState(
            key,
            data.get("version"),
            data.get("committed_by"),
            data.get("committed_operation"),
            MappingProxyType(claims),
        )

    async def claim(self, effect: EffectRecord) -> None:
        def change(data: dict[str, Any]) -> None:
            data.setdefault("claims", {})[effect.plan_id] = effect.as_json()

        await asyncio.to_thread(self._change, effect.tenant_id, effect.resource_key, change)

    async def unclaim(self, tenant_id: str, key: str, plan_id: str) -> None:
        def change(data: dict[str, Any]) -> None:
            data.get("claims", {}).pop(plan_id, None)

        await asyncio.to_thread(self._change, tenant_id, key, change)

    async def committed(
        self, tenant_id: str, key: str, version: str, plan_id: str, operation: str, claim: EffectRecord | None = None
    ) -> None:
        def change(data: dict[str, Any]) -> None:
            data.update(version=version, committed_by=plan_id, committed_operation=operation)
            if claim is not None:
                data.setdefault("claims", {})[claim.plan_id] = claim.as_json()

        await asyncio.to_thread(self._change, tenant_id, key, change)

    def _path(self, tenant_id: str, key: str) -> Path:
        return self._folder(tenant_id) / f"{_digest(key)}.json"

    def _read(self, tenant_id: str, key: str) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self._path(tenant_id, key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"resource_key": key}
        return data

    def _change(self, tenant_id: str, key: str, change: Any) -> None:
        data = self._read(tenant_id, key)
        change(data)
        data["resource_key"] = key
        write_atomic(self._path(tenant_id, key), json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))


def _open_lock(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
_RENEW = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


class RedisLedger:
    """`{prefix}{tenant}:{sha}:lock` (SET NX PX, renewed while held, compare-and-delete), `:state`
    (a hash: version, committed_by, committed_operation) and `:claims` (plan id -> effect JSON)."""

    def __init__(self, client: aioredis.Redis, prefix: str = REDIS_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    def _key(self, tenant_id: str, key: str, part: str) -> str:
        return f"{self.prefix}{tenant_id}:{_digest(key)}:{part}"

    @contextlib.asynccontextmanager
    async def lock(self, tenant_id: str, key: str, ttl_s: float, wait_s: float) -> AsyncIterator[None]:
        name, token, ttl_ms = self._key(tenant_id, key, "lock"), secrets.token_hex(16), max(1, int(ttl_s * 1000))
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + wait_s, _POLL_FIRST_S
        while not await self.client.set(name, token, nx=True, px=ttl_ms):
            if loop.time() >= deadline:
                raise ResourceBusy(f"{key} is being changed by another plan (waited {wait_s:g} s)")
            await asyncio.sleep(delay)
            delay = _backoff(delay)
        renew = asyncio.create_task(self._renew(name, token, ttl_ms), name=f"conflict-lock:{key}")
        try:
            yield
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            await self.client.eval(_RELEASE, 1, name, token)

    async def _renew(self, name: str, token: str, ttl_ms: int) -> None:
        while True:
            await asyncio.sleep(ttl_ms / 3000)
            await self.client.eval(_RENEW, 1, name, token, ttl_ms)

    async def state(self, tenant_id: str, key: str) -> ResourceState:
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self._key(tenant_id, key, "state"))
        pipe.hgetall(self._key(tenant_id, key, "claims"))
        state, claims = await pipe.execute()
        text = {k.decode(): v.decode() for k, v in state.items()}
        return ResourceState(
            key,
            text.get("version"),
            text.get("committed_by"),
            text.get("committed_operation"),
            MappingProxyType({p.decode(): EffectRecord.from_json(json.loads(e)) for p, e in claims.items()}),
        )

    async def claim(self, effect: EffectRecord) -> None:
        name = self._key(effect.tenant_id, effect.resource_key, "claims")
        await self.client.hset(name, effect.plan_id, json.dumps(effect.as_json()))

    async def unclaim(self, tenant_id: str, key: str, plan_id: str) -> None:
        await self.client.hdel(self._key(tenant_id, key, "claims"), plan_id)

    async def committed(
        self, tenant_id: str, key: str, version: str, plan_id: str, operation: str, claim: EffectRecord | None = None
    ) -> None:
        items = ["version", version, "committed_by", plan_id, "committed_operation", operation]
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self._key(tenant_id, key, "state"), items=items)
        if claim is not None:
            pipe.hset(self._key(tenant_id, key, "claims"), claim.plan_id, json.dumps(claim.as_json()))
        await pipe.execute()
