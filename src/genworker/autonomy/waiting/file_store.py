"""WAITING plans as files, with on-disk indexes so a wake-up never reads every plan.

    tenants/{t}/workers/{w}/runtime/waiting/{plan_id}.json          the plan (schema_version)
    tenants/{t}/runtime/waiting_index/keys/{h2}/{h}/{w}~{plan_id}    h = sha256(match_key): one folder per key
    tenants/{t}/runtime/waiting_index/expiry/{YYYYmmddTHHMM}/{w}~{plan_id}   one folder per minute of expiry
    tenants/{t}/runtime/waiting_index/.lock                          flock serialising the tenant's changes

An event lists one key folder; the timeout scan lists the minute folders and opens only the due
ones. Index entries are empty marker files, created (and their folder fsynced) before the plan
is written; a marker whose plan is missing or no longer waiting is removed when it is met, so a
crash between the two steps heals itself. Plans are written atomically. Every change holds
the tenant's flock, so threads and processes sharing the workspace never double-wake a plan.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from genworker.autonomy.waiting.models import (
    WaitingPlan,
    WaitingPlanNotFound,
    WaitingTransitionError,
    WaitState,
    plan_from_json,
    plan_to_json,
)
from genworker.autonomy.waiting.store import Owned
from genworker.fsutil import file_lock, fsync_dir, write_atomic
from genworker.ids import safe_join, validate_id, validate_match_key

__all__ = ["FileWaitingStore"]

_BUCKET: Final = "%Y%m%dT%H%M"
_SEP: Final = "~"


def _bucket(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(_BUCKET)


def _key_hash(match_key: str) -> str:
    return hashlib.sha256(match_key.encode("utf-8")).hexdigest()


class FileWaitingStore:
    def __init__(self, workspace_root: Path) -> None:
        self._root = workspace_root
        self._folders: dict[tuple[str, ...], Path] = {}  # safe_join resolves symlinks: once per folder

    # -- paths --------------------------------------------------------------------------------

    def _folder(self, *ids: str) -> Path:
        folder = self._folders.get(ids)
        if folder is None:
            folder = self._folders[ids] = safe_join(self._root, *ids)
        return folder

    def _index(self, tenant_id: str) -> Path:
        return self._folder("tenants", tenant_id) / "runtime" / "waiting_index"

    def _plan_path(self, tenant_id: str, worker_id: str, plan_id: str) -> Path:
        folder = self._folder("tenants", tenant_id, "workers", worker_id) / "runtime" / "waiting"
        return folder / f"{validate_id(plan_id, 'plan id')}.json"

    def _key_dir(self, tenant_id: str, match_key: str) -> Path:
        digest = _key_hash(validate_match_key(match_key))
        return self._index(tenant_id) / "keys" / digest[:2] / digest

    def _markers(self, plan: WaitingPlan) -> tuple[Path, Path]:
        name = f"{plan.worker_id}{_SEP}{plan.plan_id}"
        expiry = self._index(plan.tenant_id) / "expiry" / _bucket(plan.expires_at) / name
        return self._key_dir(plan.tenant_id, plan.match_key) / name, expiry

    # -- the interface ------------------------------------------------------------------------

    async def add(self, plan: WaitingPlan) -> WaitingPlan:
        return await asyncio.to_thread(self.add_sync, plan)

    async def get(self, tenant_id: str, worker_id: str, plan_id: str) -> WaitingPlan | None:
        return await asyncio.to_thread(self._read, self._plan_path(tenant_id, worker_id, plan_id))

    async def waiters(self, tenant_id: str, match_key: str) -> list[WaitingPlan]:
        return await asyncio.to_thread(self._waiters, tenant_id, match_key)

    async def resume(
        self,
        tenant_id: str,
        match_key: str,
        event_id: str,
        now: datetime,
        *,
        event: Mapping[str, Any] | None = None,
        gater: str | None = None,
    ) -> list[WaitingPlan]:
        return await asyncio.to_thread(self.resume_sync, tenant_id, match_key, event_id, now, event=event, gater=gater)

    async def expire_due(
        self, now: datetime, limit: int = 1000, *, only: Owned | None = None, gater: str | None = None
    ) -> list[WaitingPlan]:
        return await asyncio.to_thread(self.expire_due_sync, now, limit, only, gater)

    async def transition(
        self, tenant_id: str, worker_id: str, plan_id: str, expected: WaitState, to: WaitState, **changes: Any
    ) -> WaitingPlan:
        return await asyncio.to_thread(self._transition, tenant_id, worker_id, plan_id, expected, to, changes)

    async def list(self, tenant_id: str, worker_id: str, state: WaitState | None = None) -> list[WaitingPlan]:
        return await asyncio.to_thread(self._list, tenant_id, worker_id, state)

    async def forget_ended(self, tenant_id: str, worker_id: str, before: datetime) -> int:
        return await asyncio.to_thread(self._forget_ended, tenant_id, worker_id, before)

    async def aclose(self) -> None:
        return None

    # -- blocking implementations (also used by the benchmark) -----------------------------------

    def add_sync(self, plan: WaitingPlan) -> WaitingPlan:
        if plan.state != "waiting":
            raise WaitingTransitionError(f"plan {plan.plan_id}: a new plan starts in state waiting, not {plan.state}")
        path = self._plan_path(*plan.key)
        with file_lock(self._index(plan.tenant_id) / ".lock"):
            existing = self._read(path)
            if existing is not None:
                return existing
            self._index_plan(plan)  # markers first: a marker without its plan is dropped on sight
            self._write(path, plan)
        return plan

    def resume_sync(
        self,
        tenant_id: str,
        match_key: str,
        event_id: str,
        now: datetime,
        *,
        event: Mapping[str, Any] | None = None,
        gater: str | None = None,
    ) -> builtins.list[WaitingPlan]:
        folder = self._key_dir(tenant_id, match_key)
        woken: list[WaitingPlan] = []
        changes = {"gated_by": "event", "event_id": event_id, "event": event, "gater": gater}
        with file_lock(self._index(tenant_id) / ".lock"):
            for worker_id, plan_id in self._entries(folder):
                plan = self._read(self._plan_path(tenant_id, worker_id, plan_id))
                if plan is not None and plan.state == "waiting":
                    woken.append(self._gate(plan, now, **changes))
                elif plan is not None:
                    self._unindex(plan)
                else:
                    (folder / f"{worker_id}{_SEP}{plan_id}").unlink(missing_ok=True)
        return woken

    def expire_due_sync(
        self, now: datetime, limit: int = 1000, only: Owned | None = None, gater: str | None = None
    ) -> builtins.list[WaitingPlan]:
        expired: list[WaitingPlan] = []
        tenants = self._root / "tenants"
        for tenant in sorted(p.name for p in _scandir(tenants) if p.is_dir()):
            if len(expired) >= limit:
                break
            folder = tenants / tenant / "runtime" / "waiting_index" / "expiry"
            due = sorted(b for b in _names(folder) if b <= _bucket(now))
            if not due:
                continue
            with file_lock(self._index(tenant) / ".lock"):
                found: builtins.list[WaitingPlan] = []
                for bucket in due:
                    for worker_id, plan_id in self._entries(folder / bucket):
                        if len(expired) + len(found) >= limit:
                            break
                        if only is not None and not only(tenant, worker_id):  # another process's to time out
                            continue
                        plan = self._read(self._plan_path(tenant, worker_id, plan_id))
                        if plan is None or plan.state != "waiting":
                            (folder / bucket / f"{worker_id}{_SEP}{plan_id}").unlink(missing_ok=True)
                        elif plan.expires_at <= now:
                            found.append(plan)
                expired.extend(self._gate_many(found, now, gater))
                for bucket in due:
                    _rmdir_quietly(folder / bucket)
        return expired

    def _gate_many(
        self, plans: builtins.list[WaitingPlan], now: datetime, gater: str | None = None
    ) -> builtins.list[WaitingPlan]:
        """Timeouts in a batch: each plan file fsynced, each folder once, then the markers go."""
        moved = [plan.moved("gated", now, gated_by="timeout", gater=gater) for plan in plans]
        folders = set()
        for plan in moved:
            path = self._plan_path(*plan.key)
            replace_unsynced(path, _encode(plan))
            folders.add(path.parent)
        for folder in folders:
            fsync_dir(folder)
        for plan in plans:
            self._unindex(plan)
        return moved

    def _transition(
        self, tenant_id: str, worker_id: str, plan_id: str, expected: WaitState, to: WaitState, changes: dict[str, Any]
    ) -> WaitingPlan:
        path = self._plan_path(tenant_id, worker_id, plan_id)
        with file_lock(self._index(tenant_id) / ".lock"):
            plan = self._read(path)
            if plan is None:
                raise WaitingPlanNotFound(f"no waiting plan {plan_id!r} for worker {tenant_id}/{worker_id}")
            if plan.state != expected:
                raise WaitingTransitionError(f"plan {plan_id} is {plan.state}, not {expected}: cannot move it to {to}")
            if expected == "waiting":
                self._unindex(plan)
            moved = plan.moved(to, changes.pop("now", None) or datetime.now(UTC), **changes)
            if to == "waiting":
                self._index_plan(moved)
            self._write(path, moved)
        return moved

    def _gate(self, plan: WaitingPlan, now: datetime, **changes: Any) -> WaitingPlan:
        moved = plan.moved("gated", now, **changes)
        self._write(self._plan_path(*plan.key), moved)
        self._unindex(plan)
        return moved

    def _index_plan(self, plan: WaitingPlan) -> None:
        for marker in self._markers(plan):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_WRONLY, 0o644))
            except FileNotFoundError:  # the first marker of this key or minute
                marker.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(marker, os.O_CREAT | os.O_WRONLY, 0o644))
            fsync_dir(marker.parent)  # a plan whose marker a power loss took would never wake

    def _unindex(self, plan: WaitingPlan) -> None:
        for marker in self._markers(plan):
            marker.unlink(missing_ok=True)

    def _waiters(self, tenant_id: str, match_key: str) -> builtins.list[WaitingPlan]:
        plans = (
            self._read(self._plan_path(tenant_id, w, p)) for w, p in self._entries(self._key_dir(tenant_id, match_key))
        )
        return [p for p in plans if p is not None and p.state == "waiting"]

    def _list(self, tenant_id: str, worker_id: str, state: WaitState | None) -> builtins.list[WaitingPlan]:
        folder = self._plan_path(tenant_id, worker_id, "x").parent
        plans = [self._read(folder / name) for name in sorted(_names(folder)) if name.endswith(".json")]
        found = [p for p in plans if p is not None and (state is None or p.state == state)]
        return sorted(found, key=lambda p: (p.created_at, p.plan_id))

    def _forget_ended(self, tenant_id: str, worker_id: str, before: datetime) -> int:
        folder = self._plan_path(tenant_id, worker_id, "x").parent
        forgotten = 0
        with file_lock(self._index(tenant_id) / ".lock"):  # no transition in between
            for name in sorted(_names(folder)):
                if not name.endswith(".json"):
                    continue
                plan = self._read(folder / name)
                if plan is not None and plan.ended_before(before):
                    (folder / name).unlink(missing_ok=True)
                    forgotten += 1
            if forgotten:
                fsync_dir(folder)
        return forgotten

    def _entries(self, folder: Path) -> Iterator[tuple[str, str]]:
        for name in sorted(_names(folder)):
            worker_id, sep, plan_id = name.partition(_SEP)
            if sep:
                yield worker_id, plan_id

    @staticmethod
    def _read(path: Path) -> WaitingPlan | None:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return plan_from_json(data, path.as_posix())

    @staticmethod
    def _write(path: Path, plan: WaitingPlan) -> None:
        write_atomic(path, _encode(plan), mode=0o644)


def _encode(plan: WaitingPlan) -> bytes:
    return json.dumps(plan_to_json(plan), indent=2, ensure_ascii=False).encode("utf-8")


def replace_unsynced(path: Path, data: bytes) -> None:
    """write_atomic without the folder fsync: the caller fsyncs each folder once for a batch."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        Path(name).chmod(0o644)
        Path(name).replace(path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)  # noqa: PTH208 - names only, no Path per entry (100,000s of them)
    except FileNotFoundError:
        return []


def _scandir(folder: Path) -> list[Path]:
    return [folder / name for name in _names(folder)]


def _rmdir_quietly(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty: plans due later in this minute
        folder.rmdir()
