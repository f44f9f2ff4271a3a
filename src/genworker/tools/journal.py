"""The step journal: a side-effecting tool call is written down, durably, before it runs.

    tenants/{t}/workers/{w}/runtime/steps/{run_id}.jsonl    {"call_id", "tool", "phase": "started" | "finished"}

If the process dies mid-run, a call that started and never finished may or may not have taken
effect (the mail may be sent, the invoice paid). Recovery records such a call as
`outcome_unknown` and nothing retries it automatically. Read-only and compute calls are not
journaled: repeating them changes nothing. A run's journal is removed when the run ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Final

from genworker.ids import InvalidIdError, PathEscapeError, safe_join, validate_id
from genworker.tools.base import Effect
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.outcomes import ToolOutcome

__all__ = ["SIDE_EFFECTS", "Journaling", "StepJournal", "UnfinishedStep"]

log = logging.getLogger("genworker.tools")

SIDE_EFFECTS: Final = frozenset({Effect.WRITE, Effect.EXTERNAL, Effect.DELEGATE})


class UnfinishedStep(tuple[str, str]):
    """(call_id, tool) of a journaled call that never finished."""

    @property
    def call_id(self) -> str:
        return self[0]

    @property
    def tool(self) -> str:
        return self[1]


class StepJournal:
    """Append-only journal files, one per run. Blocking: call from a worker thread."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def path(self, tenant_id: str, worker_id: str, run_id: str) -> Path:
        worker = safe_join(self.root, "tenants", tenant_id, "workers", worker_id)
        return worker / "runtime" / "steps" / f"{validate_id(run_id, 'run id')}.jsonl"

    def _append(self, path: Path, entry: dict[str, str], *, durable: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(entry, separators=(",", ":")) + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)  # one small O_APPEND write: concurrent calls never interleave
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    def started(self, tenant_id: str, worker_id: str, run_id: str, call_id: str, tool: str) -> None:
        """Durable before the call runs (fsynced)."""
        entry = {"call_id": call_id, "tool": tool, "phase": "started"}
        self._append(self.path(tenant_id, worker_id, run_id), entry, durable=True)

    def finished(self, tenant_id: str, worker_id: str, run_id: str, call_id: str) -> None:
        """Not fsynced: losing it in a crash only makes recovery more careful, never less."""
        entry = {"call_id": call_id, "phase": "finished"}
        self._append(self.path(tenant_id, worker_id, run_id), entry, durable=False)

    def unfinished(self, tenant_id: str, worker_id: str, run_id: str) -> list[UnfinishedStep]:
        """Calls started and not finished, in start order; a torn last line is ignored."""
        try:
            lines = self.path(tenant_id, worker_id, run_id).read_text(encoding="utf-8").split("\n")
        except FileNotFoundError:
            return []
        open_calls: dict[str, str] = {}
        for line in lines:
            try:
                entry = json.loads(line)
                call_id = str(entry["call_id"])
            except (ValueError, KeyError, TypeError):
                continue
            if entry.get("phase") == "started":
                open_calls[call_id] = str(entry.get("tool", ""))
            else:
                open_calls.pop(call_id, None)
        return [UnfinishedStep((call_id, tool)) for call_id, tool in open_calls.items()]

    def discard(self, tenant_id: str, worker_id: str, run_id: str) -> None:
        self.path(tenant_id, worker_id, run_id).unlink(missing_ok=True)


class Journaling:
    """Middleware: journals side-effecting calls around `call_next` (after every check passed)."""

    def __init__(self, journal: StepJournal) -> None:
        self.journal = journal

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        if (ctx.spec.effect or Effect.EXTERNAL) not in SIDE_EFFECTS:
            return await call_next(ctx)
        scope, call = ctx.scope, ctx.call
        try:
            await asyncio.to_thread(
                self.journal.started, scope.tenant_id, scope.worker_id, scope.run_id, call.id, call.name
            )
        except (InvalidIdError, PathEscapeError):  # not a persisted run's id: nothing to recover
            return await call_next(ctx)
        try:
            outcome = await call_next(ctx)
        except Exception:  # the tool failed: its outcome is known (cancellation or a dying process is not)
            await self._finished(ctx)
            raise
        await self._finished(ctx)
        return outcome

    async def _finished(self, ctx: ToolContext) -> None:
        scope = ctx.scope
        try:
            await asyncio.to_thread(self.journal.finished, scope.tenant_id, scope.worker_id, scope.run_id, ctx.call.id)
        except OSError:
            log.warning("step journal: finish of call %s not recorded", ctx.call.id)
