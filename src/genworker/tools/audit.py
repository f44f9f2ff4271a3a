"""Audit records of tool calls and where they are kept.

One `AuditRecord` per call through the ToolPipeline, whatever its outcome (denied, needs
approval, failed, completed, cancelled). Arguments are stored with secrets redacted and
long strings clipped. `JsonlAuditSink` appends one JSON object per line.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from genworker.ids import safe_join

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "WORKER_AUDIT_FILE",
    "AuditRecord",
    "AuditSink",
    "Decision",
    "JsonlAuditSink",
    "MemoryAuditSink",
    "OutcomeKind",
    "WorkerAuditSink",
    "run_audit_records",
]

AUDIT_SCHEMA_VERSION = 1
WORKER_AUDIT_FILE = "runtime/tool_audit.jsonl"
AUDIT_TAIL_BYTES = 4 << 20  # the tail of an audit file searched for a run's calls

Decision = Literal["allow", "deny", "ask", "reject", "cancelled"]
OutcomeKind = Literal["completed", "denied", "needs_approval", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    ts: str  # ISO 8601, UTC
    tenant_id: str
    worker_id: str
    run_id: str
    call_id: str
    tool: str
    caller: str
    effect: str
    risk_level: str
    args: Any  # redacted, long strings clipped
    decision: Decision  # allow: it ran; deny: policy/hook/posture; ask: needs approval; reject: bad arguments
    outcome: OutcomeKind
    code: str | None  # the ToolDenied / ToolFailed code
    detail: str  # denial reason or error text, redacted, clipped
    duration_ms: float
    approved: bool = False  # ran because a person approved this call id
    is_error: bool = False  # the tool completed but reported an error
    schema_version: int = AUDIT_SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class AuditSink(Protocol):
    async def write(self, record: AuditRecord) -> None: ...


class MemoryAuditSink:
    """Keeps records in a list (tests, debugging)."""

    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    async def write(self, record: AuditRecord) -> None:
        self.records.append(record)


class JsonlAuditSink:
    """Appends one line per record to `path`.

    Each line is written with one `write` on an O_APPEND descriptor under an exclusive
    `flock`, so threads and processes sharing the file never interleave lines.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    async def write(self, record: AuditRecord) -> None:
        line = json.dumps(record.as_dict(), ensure_ascii=False, default=str) + "\n"
        self.append_line(line)  # on the event loop: one small append, never an fsync (no thread hop)

    def append_line(self, line: str) -> None:
        data = line.encode("utf-8")
        with self._lock:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the first record of a new worker: make its folder
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)  # also releases the flock


class WorkerAuditSink:
    """Routes each record to `tenants/{tenant}/workers/{worker}/runtime/tool_audit.jsonl` under the root,
    so one tenant's audit never lands in another's folder."""

    def __init__(self, workspace_root: Path, file: str = WORKER_AUDIT_FILE) -> None:
        self._root = workspace_root
        self._file = file
        self._sinks: dict[Path, JsonlAuditSink] = {}

    def path_for(self, tenant_id: str, worker_id: str) -> Path:
        folder = safe_join(self._root, "tenants", tenant_id, "workers", worker_id, kind="tenant/worker id")
        return folder / self._file

    async def write(self, record: AuditRecord) -> None:
        path = self.path_for(record.tenant_id, record.worker_id)
        sink = self._sinks.get(path)
        if sink is None:
            sink = self._sinks.setdefault(path, JsonlAuditSink(path))
        await sink.write(record)


def run_audit_records(path: Path, run_id: str, tail_bytes: int = AUDIT_TAIL_BYTES) -> dict[str, Mapping[str, Any]]:
    """The audit records of `run_id` in the last `tail_bytes` of the audit file at `path`, by call id
    (a call audited twice, such as one that waited for approval and then ran, keeps its last record).
    Blocking."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - tail_bytes))
            data = f.read()
    except FileNotFoundError:
        return {}
    needle = json.dumps(run_id).encode("utf-8")
    found: dict[str, Mapping[str, Any]] = {}
    for line in data.split(b"\n"):
        if needle not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:  # the first line of the tail is cut
            continue
        if isinstance(record, dict) and record.get("run_id") == run_id:
            found[str(record.get("call_id"))] = record
    return found
