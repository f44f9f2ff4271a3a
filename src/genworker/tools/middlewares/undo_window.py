"""The undo window: what "undo" means for a tool action that cannot be rolled back afterwards.

An external side effect (a sent message, a posted comment) cannot be taken back once it left,
so the undo is *before* it leaves. A run the Policy Gate let through on that condition has a
ToolScope with `undo_window_s`; in such a run every call whose effect is `external` or
`delegate` (undeclared counts as external) is recorded as a pending action, the model is told
when it will execute, and it executes when the window ends — unless a person undid it first.
Calls of other runs, and read / compute / write calls, pass straight through.

    tenants/{t}/workers/{w}/runtime/undo/{undo_id}.json           open: pending, executing
    tenants/{t}/workers/{w}/runtime/undo/decided/{undo_id}.json   every other state (schema_version 2)

    pending -> undone | expired | executing -> executed | failed | outcome_unknown

Every transition is a compare-and-set on the file under an `flock`, so across threads and
processes an undo and an execution never both win, and two processes never both execute.
`release` runs the call again through the worker's whole pipeline (policy checked at execution
time). A pending action whose timer died with its process is found by `recover()`: executed
if its deadline passed less than `max_late_s` ago, `expired` if longer, given a new timer if not
yet due. An `executing` record whose executor is gone may or may not have taken effect: it
becomes `outcome_unknown` and is never retried. A decided record moves to `decided/` (written
there first, then the open file and its lock file removed; a copy in `decided/` wins), so recovery,
which runs on every lease sweep, reads only the open ones however long the history grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal, get_args

from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join, validate_id
from genworker.observability.logging import log_decision
from genworker.tools.base import Effect, ToolResult
from genworker.tools.context import Posture, ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.outcomes import ToolCompleted, ToolFailed, ToolOutcome, outcome_text

__all__ = [
    "DEFERRED_EFFECTS",
    "SCHEMA_VERSION",
    "DeferredCall",
    "DeferredState",
    "UndoError",
    "UndoNotFound",
    "UndoTooLate",
    "UndoWindow",
]

log = logging.getLogger("genworker.tools.undo")

SCHEMA_VERSION: Final = 2
DeferredState = Literal["pending", "undone", "expired", "executing", "executed", "failed", "outcome_unknown"]
DEFERRED_EFFECTS: Final = frozenset({Effect.EXTERNAL, Effect.DELEGATE})
DEFAULT_MAX_LATE_S: Final = 3600.0
_OPEN: Final = frozenset({"pending", "executing"})

Release = Callable[["DeferredCall"], Awaitable[ToolOutcome]]
Announce = Callable[["DeferredCall"], Awaitable[None]]


class UndoError(Exception):
    """A pending action that cannot be read; see the subclasses for unknown and too late."""


class UndoNotFound(UndoError, LookupError):
    pass


class UndoTooLate(UndoError, ValueError):
    pass


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class DeferredCall:
    undo_id: str
    tenant_id: str
    worker_id: str
    run_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    posture: Posture
    created_at: datetime
    execute_at: datetime
    state: DeferredState = "pending"
    outcome: str = ""
    decided_by: str | None = None  # who undid it, or which process executed / expired it
    decided_at: datetime | None = None
    schema_version: int = SCHEMA_VERSION

    def as_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in data.items()}

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> DeferredCall:
        try:
            data = json.loads(raw)
            if data.get("schema_version") != SCHEMA_VERSION:
                raise ValueError(f"schema_version {data.get('schema_version')!r} is unknown; this build reads 2")
            if data.get("posture") not in get_args(Posture):
                raise ValueError(f"posture {data.get('posture')!r} is not one of {get_args(Posture)}")
            for name in ("created_at", "execute_at", "decided_at"):
                if data.get(name) is not None:
                    data[name] = datetime.fromisoformat(data[name])
            return cls(**data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise UndoError(f"{where}: {exc}") from None


async def _no_release(record: DeferredCall) -> ToolOutcome:
    return ToolFailed("error", f"no executor is configured for deferred call {record.undo_id}")


@dataclass
class UndoWindow:
    workspace_root: Path
    release: Release = _no_release  # runs a due call through the worker's pipeline (tools/environment.py)
    max_late_s: float = DEFAULT_MAX_LATE_S
    clock: Callable[[], datetime] = _utc_now
    owner: str = field(default_factory=lambda: f"pid-{os.getpid()}")  # the runtime sets its instance id
    announce: Announce | None = None  # an event per decided action (composition root)
    _timers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _woken: dict[str, asyncio.Event] = field(default_factory=dict)

    # -- the middleware -------------------------------------------------------------------------

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        window = ctx.scope.undo_window_s
        if window is None or (ctx.spec.effect or Effect.EXTERNAL) not in DEFERRED_EFFECTS:
            return await call_next(ctx)
        scope, now = ctx.scope, self.clock()
        record = DeferredCall(
            undo_id=f"undo_{uuid.uuid4().hex[:16]}",
            tenant_id=scope.tenant_id,
            worker_id=scope.worker_id,
            run_id=scope.run_id,
            call_id=ctx.call.id,
            tool=ctx.spec.name,
            arguments=dict(ctx.call.arguments),
            posture=scope.posture,
            created_at=now,
            execute_at=now + timedelta(seconds=window),
        )
        await asyncio.to_thread(self._write, record)
        self._schedule(record)
        when = record.execute_at.isoformat()
        log_decision(log, "undo_window", "pending", **_ids(record), tool=record.tool, execute_at=when)
        text = (
            f"Scheduled {record.tool}: it executes at {record.execute_at.isoformat()} unless a person undoes it "
            f"before then (undo id {record.undo_id})."
        )
        return ToolCompleted(ToolResult(text, data={"undo_id": record.undo_id, "state": "pending"}))

    # -- timers ---------------------------------------------------------------------------------

    def _schedule(self, record: DeferredCall) -> None:
        if record.undo_id in self._timers:
            return
        self._woken[record.undo_id] = asyncio.Event()
        self._timers[record.undo_id] = asyncio.create_task(self._timer(record), name=f"undo:{record.undo_id}")

    async def _timer(self, record: DeferredCall) -> None:
        try:
            delay = max((record.execute_at - self.clock()).total_seconds(), 0.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken[record.undo_id].wait(), delay)
            await self._execute(record)
        finally:
            self._timers.pop(record.undo_id, None)
            self._woken.pop(record.undo_id, None)

    async def _execute(self, record: DeferredCall) -> None:
        """Execute a due call, unless another process or an undo decided it first."""
        claimed = await asyncio.to_thread(self._claim, record, ("pending",), "executing", self.owner)
        if claimed is None:
            return
        try:
            outcome = await self.release(claimed)
        except Exception as exc:  # a release that raised: its outcome is known (it did not finish)
            log.exception("deferred call %s failed", record.undo_id)
            outcome = ToolFailed("error", f"{type(exc).__name__}: {exc}")
        state: DeferredState = "executed" if isinstance(outcome, ToolCompleted) else "failed"
        settled = await asyncio.to_thread(self._settle, claimed, state, outcome_text(outcome))
        await self._decided(settled)

    # -- people ---------------------------------------------------------------------------------

    async def undo(self, tenant_id: str, worker_id: str, undo_id: str, by: str) -> DeferredCall:
        """pending -> undone; raises UndoNotFound, or UndoTooLate once it executed or was decided."""
        path = self._path(tenant_id, worker_id, undo_id)
        record = await asyncio.to_thread(self._read, path)
        undone = await asyncio.to_thread(self._claim, record, ("pending",), "undone", by)
        if undone is None:
            current = await asyncio.to_thread(self._read, path)
            raise UndoTooLate(f"{undo_id} is already {current.state}: too late to undo")
        woken = self._woken.get(undo_id)
        if woken is not None:
            woken.set()
        await self._decided(undone)
        return undone

    async def get(self, tenant_id: str, worker_id: str, undo_id: str) -> DeferredCall:
        return await asyncio.to_thread(self._read, self._path(tenant_id, worker_id, undo_id))

    async def records(self, tenant_id: str, worker_id: str, state: DeferredState | None = None) -> list[DeferredCall]:
        """A worker's deferred calls, newest first; only those in `state` when given."""
        records = await asyncio.to_thread(self._all, self._folder(tenant_id, worker_id))
        return [r for r in records if state is None or r.state == state]

    # -- restarts -------------------------------------------------------------------------------

    async def recover(self, alive: Callable[[str], bool] | None = None) -> list[DeferredCall]:
        """Deferred calls no timer of this process owns, across the workspace: due ones execute
        (late by more than `max_late_s`: expired), later ones get a timer, and `executing` ones whose
        executor is not `alive` (None: every other process is gone) become outcome_unknown. Returns
        the records it acted on; `join()` waits for the executions it started."""
        records = await asyncio.to_thread(self._all_in_workspace)
        acted: list[DeferredCall] = []
        for record in records:
            if record.undo_id in self._timers:
                continue
            if record.state == "pending":
                acted.append(await self._recover_pending(record))
            elif record.state == "executing" and not await asyncio.to_thread(
                _is_alive, record.decided_by, self.owner, alive
            ):  # `alive` may read a lease file or Redis
                unknown = await asyncio.to_thread(self._claim, record, ("executing",), "outcome_unknown", self.owner)
                if unknown is not None:
                    await self._decided(unknown)
                    acted.append(unknown)
        return acted

    async def _recover_pending(self, record: DeferredCall) -> DeferredCall:
        late = (self.clock() - record.execute_at).total_seconds()
        if late > self.max_late_s:
            expired = await asyncio.to_thread(self._claim, record, ("pending",), "expired", self.owner)
            if expired is not None:
                await self._decided(expired)
                return expired
            return record
        self._schedule(record)  # due now (delay 0) or later
        return record

    async def join(self) -> None:
        """Wait until every call with a timer in this process is executed or undone."""
        while self._timers:
            await asyncio.gather(*list(self._timers.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop the timers: calls still in their window stay pending for the next `recover()`."""
        for task in list(self._timers.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _decided(self, record: DeferredCall) -> None:
        log_decision(log, "undo_window", record.state, **_ids(record), tool=record.tool, by=record.decided_by)
        if self.announce is not None:
            try:
                await self.announce(record)
            except Exception:  # the record is the truth; the event is best effort
                log.warning("undo window event for %s not published", record.undo_id, exc_info=True)

    # -- files (blocking) -----------------------------------------------------------------------

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.workspace_root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "undo"

    def _path(self, tenant_id: str, worker_id: str, undo_id: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{validate_id(undo_id, 'undo id')}.json"

    def _read(self, path: Path) -> DeferredCall:
        """The record whose open file is `path`: its decided copy when there is one."""
        for candidate in (_decided(path), path):
            with contextlib.suppress(FileNotFoundError):
                return DeferredCall.from_json(candidate.read_bytes(), candidate.as_posix())
        raise UndoNotFound(f"no deferred call {path.stem!r}")

    def _all(self, folder: Path) -> list[DeferredCall]:
        names = {p.name for p in folder.glob("undo_*.json")} | {p.name for p in folder.glob("decided/undo_*.json")}
        records = [self._read(folder / name) for name in names]
        return sorted(records, key=lambda r: r.created_at, reverse=True)

    def _all_in_workspace(self) -> list[DeferredCall]:
        """The open records (pending, executing) of every worker: what recovery acts on."""
        found = []
        for folder in sorted(self.workspace_root.glob("tenants/*/workers/*/runtime/undo")):
            for path in sorted(folder.glob("undo_*.json")):
                try:
                    record = self._read(path)
                except UndoError as exc:  # one unreadable file must not stop recovery of the others
                    log.error("undo recovery skipped %s: %s", path, exc)
                    continue
                if record.state in _OPEN:
                    found.append(record)
                else:  # decided, but a crash kept the open file: finish the move
                    path.unlink(missing_ok=True)
        return found

    def _write(self, record: DeferredCall) -> None:
        path = self._path(record.tenant_id, record.worker_id, record.undo_id)
        data = json.dumps(record.as_json(), indent=2, ensure_ascii=False).encode("utf-8")
        if record.state in _OPEN:
            write_atomic(path, data, mode=0o644)
            return
        write_atomic(_decided(path), data, mode=0o644)  # first the decided copy, then the open file goes
        path.unlink(missing_ok=True)
        # Its lock file too (the caller holds that lock): a decided record is final, so whoever locks the
        # old file or a new one after this reads the decided copy and changes nothing.
        path.with_suffix(".lock").unlink(missing_ok=True)

    def _claim(
        self, record: DeferredCall, expected: tuple[DeferredState, ...], state: DeferredState, by: str
    ) -> DeferredCall | None:
        """`expected` -> `state` under the lock; None when the record is no longer in `expected`."""
        path = self._path(record.tenant_id, record.worker_id, record.undo_id)
        with file_lock(path.with_suffix(".lock")):
            current = self._read(path)
            if current.state not in expected:
                if current.state not in _OPEN:  # a late claimer (say, the window's timer) made it again
                    path.with_suffix(".lock").unlink(missing_ok=True)
                return None
            changed = replace(current, state=state, decided_by=by, decided_at=self.clock())
            self._write(changed)
            return changed

    def _settle(self, record: DeferredCall, state: DeferredState, outcome: str) -> DeferredCall:
        path = self._path(record.tenant_id, record.worker_id, record.undo_id)
        with file_lock(path.with_suffix(".lock")):
            settled = replace(self._read(path), state=state, outcome=outcome, decided_at=self.clock())
            self._write(settled)
            return settled


def _decided(path: Path) -> Path:
    return path.parent / "decided" / path.name


def _is_alive(executor: str | None, me: str, alive: Callable[[str], bool] | None) -> bool:
    if executor is None:
        return False
    if alive is None:
        return False  # at start-up with one process: whoever was executing is gone
    return executor != me and alive(executor)


def _ids(record: DeferredCall) -> dict[str, str]:
    return {
        "tenant_id": record.tenant_id,
        "worker_id": record.worker_id,
        "run_id": record.run_id,
        "undo_id": record.undo_id,
    }
