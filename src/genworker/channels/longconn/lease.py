"""Binding leases: exactly one process holds a binding's long connection.

With Redis (the shared profile) the lease is `genworker:longconn:{adapter_id}` = `{owner}:{token}`,
taken with `SET NX PX`, renewed by its holder every third of its ttl (compare-and-PEXPIRE), and
released with compare-and-delete plus a `PUBLISH` on `{key}:released`, so a standby process takes
the binding over at once; a crashed holder's lease expires within its ttl. Without Redis, the
lease is an exclusive `flock` on `runtime/channels/longconn/{key}.lock` in the worker folder:
every process on the workspace sees it, and the kernel drops it when its process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import uuid
from pathlib import Path
from typing import IO, Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from genworker.channels.registry import ChannelBinding
from genworker.ids import safe_join

__all__ = ["BindingLease", "FileBindingLease", "RedisBindingLease"]

PREFIX: Final = "genworker:longconn"

_RENEW: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[2], '1')
    return 1
end
return 0
"""


class BindingLease(Protocol):
    ttl_s: float

    async def acquire(self) -> bool:
        """True when this process holds the lease now (taken, or already held)."""
        ...

    async def renew(self) -> bool:
        """False once the lease is no longer this process's."""
        ...

    async def release(self) -> None: ...

    async def wait(self, timeout_s: float) -> None:
        """Until the lease may be free, at most `timeout_s`."""
        ...

    async def holder(self) -> str:
        """Who holds it ("" when unknown)."""
        ...


def _text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class RedisBindingLease:
    def __init__(self, client: Redis, adapter_id: str, owner: str, *, ttl_s: float = 30.0) -> None:
        self.client = client
        self.key = f"{PREFIX}:{adapter_id}"
        self.channel = f"{self.key}:released"
        self.token = f"{owner}:{uuid.uuid4().hex}"
        self.ttl_s = ttl_s
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @property
    def _ttl_ms(self) -> int:
        return max(int(self.ttl_s * 1000), 10)

    async def acquire(self) -> bool:
        if await self.client.set(self.key, self.token, nx=True, px=self._ttl_ms):
            return True
        return _text(await self.client.get(self.key)) == self.token

    async def renew(self) -> bool:
        return bool(await self._renew(keys=[self.key], args=[self.token, self._ttl_ms]))

    async def release(self) -> None:
        with contextlib.suppress(RedisError):  # else it expires by itself
            await self._release(keys=[self.key], args=[self.token, self.channel])

    async def wait(self, timeout_s: float) -> None:
        pubsub = self.client.pubsub()
        try:
            await pubsub.subscribe(self.channel)  # before looking, so no release goes unnoticed
            remaining_ms = int(await self.client.pttl(self.key))  # -2: gone already
            if remaining_ms == -2:
                return
            limit = timeout_s if remaining_ms < 0 else min(timeout_s, remaining_ms / 1000 + 0.005)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    while await pubsub.get_message(ignore_subscribe_messages=True, timeout=limit) is None:
                        pass
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def holder(self) -> str:
        return _text(await self.client.get(self.key)).rpartition(":")[0]


class FileBindingLease:
    def __init__(self, workspace: Path, binding: ChannelBinding, owner: str, *, ttl_s: float = 30.0) -> None:
        self.workspace, self.binding = workspace, binding
        self.owner = owner
        self.ttl_s = ttl_s  # how often a standby process looks again
        self._file: IO[str] | None = None

    async def acquire(self) -> bool:
        if self._file is not None:
            return True
        self._file = await asyncio.to_thread(self._lock)
        return self._file is not None

    @property
    def path(self) -> Path:
        """Blocking (checks the worker folder for symlinks): call off the loop."""
        b = self.binding
        folder = safe_join(self.workspace, "tenants", b.tenant_id, "workers", b.worker_id)
        return folder / "runtime" / "channels" / "longconn" / f"{b.key}.lock"

    def _lock(self) -> IO[str] | None:
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"owner": self.owner, "pid": os.getpid()}))
        handle.flush()
        return handle

    async def renew(self) -> bool:
        return self._file is not None  # held while this process keeps the file open

    async def release(self) -> None:
        handle, self._file = self._file, None
        if handle is not None:
            handle.close()  # also drops the lock

    async def wait(self, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)  # a lock file announces no release

    async def holder(self) -> str:
        def read() -> str:
            try:
                return str(json.loads(self.path.read_text(encoding="utf-8")).get("owner", ""))
            except (OSError, ValueError, AttributeError):
                return ""

        return await asyncio.to_thread(read)
