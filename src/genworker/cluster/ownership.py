"""Worker ownership: which live runtime process runs a worker's autonomy loop (issue #30).

Every process sharing one Redis computes the same owner for a worker key `tenant/worker` by
rendezvous (highest random weight) hashing over the live instance ids: each instance scores the
key with a hash of (instance, key) and the highest score owns it. All processes agree as soon as
they see the same live set, and when an instance joins or leaves only the keys it wins or held
move; every other worker stays where it was.

Views of the live set differ for a moment around a join or a death, so the hash alone could let
two processes act at once. Acting therefore also needs the worker's claim in Redis:
`genworker:owner:{tenant}/{worker}` = the holder's instance id, taken with `SET NX PX` (the lease
ttl), renewed by its holder only while the hash still names it (compare-and-PEXPIRE) and
released with compare-and-delete. A new owner takes the claim once the old one is released (a
process that stops, or learns it no longer owns the key) or has expired (a process that died):
at no moment do two processes hold it.

The live set comes from the instance leases (`worker/lifecycle/leases.py`: Redis keys
`genworker:instance:{id}` that expire unless renewed); `RedisLiveInstances` reads them by prefix.
Call `beat` every third of the ttl with the workers this process serves, and `release_all` when
it stops.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Final, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

__all__ = ["CLAIM_PREFIX", "LiveInstances", "Ownership", "RedisLiveInstances", "rendezvous_owner", "worker_key"]

log = logging.getLogger("genworker.cluster")

CLAIM_PREFIX: Final = "genworker:owner:"

_TAKE_OR_RENEW: Final = """
local holder = redis.call('GET', KEYS[1])
if holder == false then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 1
end
if holder == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return 1
end
return 0
"""
_RELEASE: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def worker_key(tenant_id: str, worker_id: str) -> str:
    return f"{tenant_id}/{worker_id}"


def _score(instance_id: str, key: str) -> int:
    digest = hashlib.blake2b(f"{instance_id}\x1f{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_owner(key: str, instances: Iterable[str]) -> str | None:
    """The instance that owns `key` among `instances` (None when there is none); ties go to the
    greater id, so every process picks the same one."""
    return max(instances, key=lambda instance: (_score(instance, key), instance), default=None)


class LiveInstances(Protocol):
    async def live(self) -> frozenset[str]:
        """The ids of the instances holding an unexpired lease now."""
        ...


class RedisLiveInstances:
    """The live set from the instance leases' Redis keys (`{prefix}{instance_id}`, expiring)."""

    def __init__(self, client: Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    async def live(self) -> frozenset[str]:
        found = set()
        async for key in self.client.scan_iter(match=f"{self.prefix}*", count=500):
            name = key.decode() if isinstance(key, bytes) else str(key)
            found.add(name.removeprefix(self.prefix))
        return frozenset(found)


class Ownership:
    """This instance's view of who owns which worker, and the claims it holds."""

    def __init__(
        self,
        client: Redis,
        instance_id: str,
        live: LiveInstances,
        *,
        ttl: timedelta = timedelta(seconds=30),
        prefix: str = CLAIM_PREFIX,
    ) -> None:
        self.client = client
        self.instance_id = instance_id
        self.ttl = ttl
        self.prefix = prefix
        self._live_source = live
        self._live: frozenset[str] = frozenset({instance_id})
        self._held: set[str] = set()
        self._take_or_renew = client.register_script(_TAKE_OR_RENEW)
        self._release = client.register_script(_RELEASE)

    @property
    def live(self) -> frozenset[str]:
        """The live set as last refreshed (this instance always counts as live)."""
        return self._live

    @property
    def held(self) -> frozenset[str]:
        """The worker keys whose claim this instance held at its last claim or beat."""
        return frozenset(self._held)

    @property
    def _ttl_ms(self) -> int:
        return max(int(self.ttl.total_seconds() * 1000), 10)

    async def refresh(self) -> frozenset[str]:
        self._live = await self._live_source.live() | {self.instance_id}
        return self._live

    def owner(self, tenant_id: str, worker_id: str) -> str | None:
        return rendezvous_owner(worker_key(tenant_id, worker_id), self._live)

    def owns(self, tenant_id: str, worker_id: str) -> bool:
        """The hash names this instance, by the live set as last refreshed (no I/O)."""
        return self.owner(tenant_id, worker_id) == self.instance_id

    def holds(self, tenant_id: str, worker_id: str) -> bool:
        """This instance may act for the worker: it held the claim at its last claim or beat (no I/O)."""
        return worker_key(tenant_id, worker_id) in self._held

    async def claim(self, tenant_id: str, worker_id: str) -> bool:
        """Take or renew the worker's claim when this instance owns it, else give it up if held;
        True when this instance holds the claim now."""
        key = worker_key(tenant_id, worker_id)
        if not self.owns(tenant_id, worker_id):
            if key in self._held:
                await self._give_up(key)
            return False
        if await self._take_or_renew(keys=[self.prefix + key], args=[self.instance_id, self._ttl_ms]):
            self._held.add(key)
            return True
        self._held.discard(key)  # the previous owner still holds it: wait for its release or expiry
        return False

    async def beat(self, workers: Iterable[tuple[str, str]]) -> frozenset[str]:
        """Refresh the live set, claim every worker this instance owns and give up the rest; the keys
        held now. While Redis cannot be reached nothing is held (no process can prove it owns a
        worker then), and the error is logged."""
        pairs = set(workers)  # an iterable read once
        try:
            await self.refresh()
            wanted = {worker_key(t, w) for t, w in pairs}
            for key in sorted(self._held - wanted):  # a worker that was removed
                await self._give_up(key)
            for tenant_id, worker_id in sorted(pairs):
                await self.claim(tenant_id, worker_id)
        except RedisError as exc:
            if self._held:
                log.warning("[Cluster] Redis unreachable, %d worker claims dropped: %s", len(self._held), exc)
            self._held.clear()
        return self.held

    async def release_all(self) -> None:
        """Give up every claim at once (the process stops): the next owners need not wait for expiry."""
        for key in sorted(self._held):
            try:
                await self._give_up(key)
            except RedisError as exc:  # it expires by itself within the ttl
                log.warning("[Cluster] releasing the claim on %s failed: %s", key, exc)
        self._held.clear()

    async def _give_up(self, key: str) -> None:
        self._held.discard(key)
        await self._release(keys=[self.prefix + key], args=[self.instance_id])
