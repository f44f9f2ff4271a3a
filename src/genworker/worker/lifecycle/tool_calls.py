"""An AuditSink that also records each tool call on its run (name, call id, outcome, duration)."""

from __future__ import annotations

import logging

from genworker.ids import InvalidIdError
from genworker.tools.audit import AuditRecord, AuditSink
from genworker.worker.lifecycle.errors import RunClosed, RunNotFound
from genworker.worker.lifecycle.task_aggregate import TaskLifecycle
from genworker.worker.task import RunRef, ToolCallRecord

__all__ = ["RunToolCallSink"]

log = logging.getLogger("genworker.worker.lifecycle")


class RunToolCallSink:
    """Writes to `inner`, then appends the call to its run. Calls outside a persisted run (a chat
    turn without a task) are only audited."""

    def __init__(self, lifecycle: TaskLifecycle, inner: AuditSink) -> None:
        self._lifecycle = lifecycle
        self._inner = inner

    async def write(self, record: AuditRecord) -> None:
        await self._inner.write(record)
        try:
            ref = RunRef(record.tenant_id, record.worker_id, record.run_id)
            await self._lifecycle.record_tool_call(ref, ToolCallRecord.from_audit(record))
        except (InvalidIdError, RunNotFound):
            return
        except RunClosed as exc:
            log.warning("tool call %s not recorded: %s", record.call_id, exc)
