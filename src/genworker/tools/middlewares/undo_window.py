"""The undo window: what "undo" means for a tool action that cannot be rolled back afterwards.

An external side effect (a sent message, a posted comment) cannot be taken back once it left,
so the undo is *before* it leaves: the call is held for `undo_window_seconds` (60 s by default)
and only then executed. Until then a person can undo it, and it never happens. This is the
Policy Gate's "working undo" for `undo_window` actions: high-risk auto is allowed only for runs
whose external tool calls go through this window.

Tool middleware `(ctx, call_next)`: a call of an *armed* run (`arm(run_id)`) whose effect is
external or delegate is recorded as pending, the model is told it is scheduled (with the undo
id), and `call_next` runs when the window closes — unless `undo` won first. Both sides claim
the record under a file lock, so undo and commit never both succeed.

    tenants/{t}/workers/{w}/runtime/undo/{undo_id}.json   (schema_version)

A pending call whose process died is never executed later (its continuation is gone):
`recover()` marks it `dropped`, which the brief can report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join, validate_id
from genworker.tools.base import Effect, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.outcomes import ToolCompleted, ToolOutcome, outcome_text

__all__ = ["SCHEMA_VERSION", "DeferredCall", "UndoError", "UndoWindow"]

SCHEMA_VERSION: Final = 1
DeferredState = Literal["pending", "committed", "failed", "undone", "dropped"]
_DEFERRED_EFFECTS = frozenset({Effect.EXTERNAL, Effect.DELEGATE})


class UndoError(Exception):
    """Unknown undo id (LookupError) or too late to undo (ValueError) — see the subclasses."""


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
    tool: str
    arguments: dict[str, Any]
    created_at: datetime
    commit_at: datetime
    state: DeferredState = "pending"
    outcome: str = ""
    decided_by: str | None = None
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
                raise ValueError(f"schema_version {data.get('schema_version')!r} is unknown; this build reads 1")
            for name in ("created_at", "commit_at", "decided_at"):
                if data.get(name) is not None:
                    data[name] = datetime.fromisoformat(data[name])
            return cls(**data)
        except (ValueError, TypeError, AttributeError) as exc:
            raise UndoError(f"{where}: {exc}") from None


@dataclass
class UndoWindow:
    workspace_root: Path
    window_s: Callable[[str, str], float] = field(default=lambda tenant_id, worker_id: 60.0)
    clock: Callable[[], datetime] = _utc_now
    _armed: set[str] = field(default_factory=set)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _undone: dict[str, asyncio.Event] = field(default_factory=dict)

    # -- which runs -----------------------------------------------------------------------------

    def arm(self, run_id: str) -> None:
        """The run's external calls go through the window (the gate allowed it on that condition)."""
        self._armed.add(run_id)

    def disarm(self, run_id: str) -> None:
        self._armed.discard(run_id)

    # -- the middleware -------------------------------------------------------------------------

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        if ctx.scope.run_id not in self._armed or ctx.spec.effect not in _DEFERRED_EFFECTS:
            return await call_next(ctx)
        scope = ctx.scope
        now = self.clock()
        record = DeferredCall(
            undo_id=f"undo_{uuid.uuid4().hex[:16]}",
            tenant_id=scope.tenant_id,
            worker_id=scope.worker_id,
            run_id=scope.run_id,
            tool=ctx.spec.name,
            arguments=dict(ctx.call.arguments),
            created_at=now,
            commit_at=now + timedelta(seconds=self.window_s(scope.tenant_id, scope.worker_id)),
        )
        await asyncio.to_thread(self._write, record)
        self._undone[record.undo_id] = asyncio.Event()
        self._tasks[record.undo_id] = asyncio.create_task(self._commit_later(record, ctx, call_next))
        text = (
            f"Scheduled {ctx.spec.name}: it runs at {record.commit_at.isoformat()} unless undone "
            f"(undo id {record.undo_id})."
        )
        return ToolCompleted(ToolResult(text))

    async def _commit_later(self, record: DeferredCall, ctx: ToolContext, call_next: CallNext) -> None:
        delay = max((record.commit_at - self.clock()).total_seconds(), 0.0)
        undone = self._undone[record.undo_id]
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(undone.wait(), delay)
            if undone.is_set() or not await asyncio.to_thread(self._claim, record, "committed", "window", None):
                return
            outcome = await call_next(ctx)
            state: DeferredState = "committed" if isinstance(outcome, ToolCompleted) else "failed"
            await asyncio.to_thread(self._settle, record, state, outcome_text(outcome))
        finally:
            self._tasks.pop(record.undo_id, None)
            self._undone.pop(record.undo_id, None)

    # -- people ---------------------------------------------------------------------------------

    async def undo(self, tenant_id: str, worker_id: str, undo_id: str, by: str) -> DeferredCall:
        """Cancel a pending call; raises UndoNotFound, or UndoTooLate once it ran (or was decided)."""
        path = self._path(tenant_id, worker_id, undo_id)
        record = await asyncio.to_thread(self._read, path)
        if not await asyncio.to_thread(self._claim, record, "undone", by, self.clock()):
            current = await asyncio.to_thread(self._read, path)
            raise UndoTooLate(f"{undo_id} is already {current.state}: too late to undo")
        event = self._undone.get(undo_id)
        if event is not None:
            event.set()
        return await asyncio.to_thread(self._read, path)

    async def get(self, tenant_id: str, worker_id: str, undo_id: str) -> DeferredCall:
        return await asyncio.to_thread(self._read, self._path(tenant_id, worker_id, undo_id))

    def recover(self, tenant_id: str, worker_id: str) -> list[DeferredCall]:
        """Blocking: mark pending calls no live task owns as dropped (after a restart)."""
        folder = self._folder(tenant_id, worker_id)
        dropped = []
        for path in sorted(folder.glob("undo_*.json")) if folder.is_dir() else []:
            record = self._read(path)
            owned = record.undo_id in self._tasks
            if record.state == "pending" and not owned and self._claim(record, "dropped", "restart", self.clock()):
                dropped.append(self._read(path))
        return dropped

    async def join(self) -> None:
        """Wait until every call now in its window is committed or undone."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop waiting: calls still in their window are dropped, never executed late."""
        for task in list(self._tasks.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- files ----------------------------------------------------------------------------------

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.workspace_root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "undo"

    def _path(self, tenant_id: str, worker_id: str, undo_id: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{validate_id(undo_id, 'undo id')}.json"

    def _read(self, path: Path) -> DeferredCall:
        try:
            return DeferredCall.from_json(path.read_bytes(), path.as_posix())
        except FileNotFoundError:
            raise UndoNotFound(f"no pending call {path.stem!r}") from None

    def _write(self, record: DeferredCall) -> None:
        path = self._path(record.tenant_id, record.worker_id, record.undo_id)
        write_atomic(path, json.dumps(record.as_json(), indent=2, ensure_ascii=False).encode("utf-8"), mode=0o644)

    def _claim(self, record: DeferredCall, state: DeferredState, by: str, at: datetime | None) -> bool:
        """pending -> `state`, under the lock; False when someone else decided first."""
        path = self._path(record.tenant_id, record.worker_id, record.undo_id)
        with file_lock(path.with_suffix(".lock")):
            current = self._read(path)
            if current.state != "pending":
                return False
            self._write(replace(current, state=state, decided_by=by, decided_at=at or self.clock()))
            return True

    def _settle(self, record: DeferredCall, state: DeferredState, outcome: str) -> None:
        path = self._path(record.tenant_id, record.worker_id, record.undo_id)
        with file_lock(path.with_suffix(".lock")):
            self._write(replace(self._read(path), state=state, outcome=outcome))
