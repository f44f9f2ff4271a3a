"""Instance leases: which runtime processes are alive, so recovery interrupts only orphaned runs.

Every runtime process holds a lease named by its instance id, renewed well inside its ttl. A run
records the instance that runs it (`RunRecord.owner`); a run left running whose owner holds no
live lease is an orphan (its process died) and becomes `interrupted`. A second process starting
on the same workspace therefore leaves the first one's live runs alone.

Leases are files under `{workspace}/runtime/instances/` (every process on one workspace sees
them) or, with REDIS_URL, Redis keys that expire on their own. A file lease also names its
process (host, pid namespace, pid): one whose process is gone from this host is dead at once,
without waiting for its expiry, so a restart after a crash takes over the runs it left.

A process that is shutting down `drain`s its lease: it stays alive (its runs are left alone) but
leaves the live set that worker ownership hashes over (`cluster/ownership.py` reads the
`genworker:instance:` keys), so its workers move to the others at once. In Redis the lease moves
to `genworker:instance-draining:{id}`; files have no ownership, so a file lease is unchanged.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, Protocol

import redis

from genworker.fsutil import write_atomic
from genworker.ids import InvalidIdError, validate_id

__all__ = [
    "DEFAULT_TTL",
    "DRAINING_PREFIX",
    "FileInstanceLeases",
    "InstanceLeases",
    "RedisInstanceLeases",
    "new_instance_id",
]

DEFAULT_TTL: Final = timedelta(seconds=30)
SCHEMA_VERSION: Final = 1
REDIS_PREFIX: Final = "genworker:instance:"
DRAINING_PREFIX: Final = "genworker:instance-draining:"  # not matched by `genworker:instance:*`


def new_instance_id() -> str:
    return f"rt_{uuid.uuid4().hex[:16]}"


class InstanceLeases(Protocol):
    instance_id: str
    ttl: timedelta

    def renew(self) -> None: ...

    def alive(self, instance_id: str) -> bool: ...

    def drain(self) -> None:
        """Stay alive, but out of the live set worker ownership hashes over (the process stops)."""
        ...

    def release(self) -> None: ...


def _pid_namespace() -> str | None:
    """The pid namespace's id (containers sharing a volume and a host name have different ones)."""
    try:
        return str(Path("/proc/self/ns/pid").readlink())
    except OSError:
        return None


class FileInstanceLeases:
    """`runtime/instances/{instance_id}.json` holding its expiry. Blocking: call off the loop."""

    def __init__(
        self,
        workspace_root: Path,
        instance_id: str | None = None,
        *,
        ttl: timedelta = DEFAULT_TTL,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.folder = workspace_root / "runtime" / "instances"
        self.instance_id = instance_id or new_instance_id()
        self.ttl = ttl
        self._clock = clock

    def _path(self, instance_id: str) -> Path:
        return self.folder / f"{validate_id(instance_id, 'instance id')}.json"

    def renew(self) -> None:
        now = self._clock()
        doc = {
            "schema_version": SCHEMA_VERSION,
            "instance_id": self.instance_id,
            "pid": os.getpid(),
            "pid_ns": _pid_namespace(),
            "host": socket.gethostname(),
            "renewed_at": now.isoformat(),
            "expires_at": (now + self.ttl).isoformat(),
        }
        write_atomic(self._path(self.instance_id), json.dumps(doc, indent=2).encode("utf-8"))

    def alive(self, instance_id: str) -> bool:
        """True while `instance_id` holds an unexpired lease; an unreadable lease counts as dead."""
        try:
            doc = json.loads(self._path(instance_id).read_text(encoding="utf-8"))
            unexpired = bool(datetime.fromisoformat(doc["expires_at"]) > self._clock())
        except (OSError, ValueError, KeyError, TypeError, InvalidIdError):
            return False
        return unexpired and not self._gone(doc)

    @staticmethod
    def _gone(doc: dict[str, object]) -> bool:
        """The lease's process is known to have exited: it ran on this host in this pid namespace and
        its pid is not running. (A pid reused since, or this process's own, counts as running.)"""
        pid = doc.get("pid")
        if doc.get("host") != socket.gethostname() or doc.get("pid_ns") != _pid_namespace() or not isinstance(pid, int):
            return False
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # someone else's process: running
            return False
        return False

    def drain(self) -> None:
        """Files have no worker ownership: nothing changes."""

    def release(self) -> None:
        self._path(self.instance_id).unlink(missing_ok=True)


class RedisInstanceLeases:
    """`genworker:instance:{id}` set with a ttl (`genworker:instance-draining:{id}` once drained);
    Redis drops it when the process stops renewing."""

    def __init__(
        self, client: redis.Redis, instance_id: str | None = None, *, ttl: timedelta = DEFAULT_TTL
    ) -> None:
        self.client = client
        self.instance_id = instance_id or new_instance_id()
        self.ttl = ttl
        self.draining = False

    def renew(self) -> None:
        prefix = DRAINING_PREFIX if self.draining else REDIS_PREFIX
        self.client.set(f"{prefix}{self.instance_id}", socket.gethostname(), px=self._ttl_ms)

    @property
    def _ttl_ms(self) -> int:
        return int(self.ttl.total_seconds() * 1000)

    def alive(self, instance_id: str) -> bool:
        return bool(self.client.exists(f"{REDIS_PREFIX}{instance_id}", f"{DRAINING_PREFIX}{instance_id}"))

    def drain(self) -> None:
        self.draining = True
        pipe = self.client.pipeline()  # MULTI: alive throughout
        pipe.set(f"{DRAINING_PREFIX}{self.instance_id}", socket.gethostname(), px=self._ttl_ms)
        pipe.delete(f"{REDIS_PREFIX}{self.instance_id}")
        pipe.execute()

    def release(self) -> None:
        self.client.delete(f"{REDIS_PREFIX}{self.instance_id}", f"{DRAINING_PREFIX}{self.instance_id}")
