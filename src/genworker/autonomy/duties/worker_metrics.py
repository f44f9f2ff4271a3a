"""WorkerMetrics: the MetricSource condition triggers read by default.

- Built in, read live: ``inbox.pending``, ``inbox.processing``, ``inbox.failed``, ``inbox.dead``,
  ``inbox.consumed`` — the worker's inbox counts.
- Built in, from the duty's own history (a condition trigger of that duty; upstream genworker's
  names): over its last 20 runs, ``error_rate`` / ``failure_rate`` (the share that failed:
  failed, budget_exceeded, interrupted), ``failure_count``, ``avg_duration`` /
  ``avg_duration_seconds`` and ``last_duration`` / ``last_duration_seconds`` (seconds a run ran).
  ``anomaly_count``, ``avg_anomaly_count`` and ``escalation_rate`` are not recorded here: unknown.
- Reported: any other name holds the last value a client PUT through
  ``/api/v1/workers/{worker_id}/metrics/{name}`` (a number or true/false), kept in
  ``tenants/{t}/workers/{w}/runtime/metrics.json`` so a restart does not forget it.

A metric never reported reads as unknown (None), so its condition counts as false.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from genworker.autonomy.duties.conditions import MetricValue
from genworker.autonomy.duties.store import DutyStore, ExecutionRecord
from genworker.autonomy.inbox import InboxState, InboxStore
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.lifecycle import TaskLifecycle, TaskLifecycleError
from genworker.worker.task import RunRecord, RunRef

__all__ = ["BUILTIN_PREFIX", "HISTORY_METRICS", "MetricError", "WorkerMetrics"]

SCHEMA_VERSION: Final = 1
BUILTIN_PREFIX: Final = "inbox."
HISTORY_WINDOW: Final = 20
_FAILED: Final = frozenset({"failed", "budget_exceeded", "interrupted"})
HISTORY_METRICS: Final = frozenset(
    {
        "error_rate", "failure_rate", "failure_count", "avg_duration", "avg_duration_seconds", "last_duration",
        "last_duration_seconds", "anomaly_count", "avg_anomaly_count", "escalation_rate",
    }
)  # fmt: skip
_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")


class MetricError(ValueError):
    """A bad metric name or value, or an unreadable metrics file."""


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise MetricError(f"metric name {name!r} must be 1-64 of a-z 0-9 _ . : - (starting with a letter or digit)")
    return name


class WorkerMetrics:
    def __init__(self, workspace_root: Path, inbox: InboxStore | None = None) -> None:
        self.root = workspace_root
        self.inbox = inbox

    def path(self, tenant_id: str, worker_id: str) -> Path:
        worker = safe_join(
            self.root, "tenants", validate_id(tenant_id, "tenant id"), "workers", validate_id(worker_id, "worker id")
        )
        return worker / "runtime" / "metrics.json"

    async def read(self, tenant_id: str, worker_id: str, metric: str, duty_id: str | None = None) -> MetricValue:
        if duty_id is not None and metric.lower() in HISTORY_METRICS:
            return await self._history(tenant_id, worker_id, duty_id, metric.lower())
        if metric.startswith(BUILTIN_PREFIX):
            return await self._inbox_count(tenant_id, worker_id, metric.removeprefix(BUILTIN_PREFIX))
        entry = (await asyncio.to_thread(self._load, tenant_id, worker_id)).get(metric)
        return None if entry is None else _value(entry.get("value"))

    async def values(self, tenant_id: str, worker_id: str) -> dict[str, dict[str, Any]]:
        """The reported metrics: {name: {"value", "updated_at"}}."""
        return await asyncio.to_thread(self._load, tenant_id, worker_id)

    async def report(self, tenant_id: str, worker_id: str, name: str, value: float | bool) -> dict[str, Any]:
        check_name(name)
        if name.startswith(BUILTIN_PREFIX):
            raise MetricError(f"metric {name!r} is built in (read from the inbox) and cannot be reported")
        if _value(value) is None:
            raise MetricError(f"metric {name!r}: value must be a finite number or true/false, got {value!r}")
        entry = {"value": value, "updated_at": datetime.now(UTC).isoformat()}
        await asyncio.to_thread(self._store, tenant_id, worker_id, name, entry)
        return entry

    async def _inbox_count(self, tenant_id: str, worker_id: str, state: str) -> MetricValue:
        if self.inbox is None or state not in {s.value for s in InboxState}:
            return None
        return float((await self.inbox.counts(tenant_id, worker_id))[InboxState(state)])

    async def _history(self, tenant_id: str, worker_id: str, duty_id: str, metric: str) -> MetricValue:
        """A metric of the duty's last runs (their run records, where still readable); None without runs."""
        executions = await asyncio.to_thread(DutyStore(self.root).executions, tenant_id, worker_id, duty_id)
        records = executions[-HISTORY_WINDOW:]
        if not records:
            return None
        lifecycle = TaskLifecycle(self.root)
        runs = await asyncio.gather(*(_run(lifecycle, tenant_id, worker_id, r) for r in records))
        states = [run.state.value if run is not None else r.state for r, run in zip(records, runs, strict=True)]
        failures = sum(1 for state in states if state in _FAILED)
        durations = [run.timings.run_ms / 1000 for run in runs if run is not None and run.timings.run_ms is not None]
        if metric in ("error_rate", "failure_rate"):
            return failures / len(records)
        if metric == "failure_count":
            return float(failures)
        if metric in ("avg_duration", "avg_duration_seconds"):
            return sum(durations) / len(durations) if durations else None
        if metric in ("last_duration", "last_duration_seconds"):
            return durations[-1] if durations else None
        return None  # anomalies and escalations are not recorded per run

    def _load(self, tenant_id: str, worker_id: str) -> dict[str, dict[str, Any]]:
        path = self.path(tenant_id, worker_id)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise MetricError(f"{path}: unreadable: {exc}") from None
        if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
            version = doc.get("schema_version") if isinstance(doc, dict) else None
            raise MetricError(f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
        values = doc.get("values")
        return dict(values) if isinstance(values, dict) else {}

    def _store(self, tenant_id: str, worker_id: str, name: str, entry: dict[str, Any]) -> None:
        path = self.path(tenant_id, worker_id)
        with file_lock(path.with_name(f".{path.name}.lock")):
            values = self._load(tenant_id, worker_id)
            values[name] = entry
            doc = {"schema_version": SCHEMA_VERSION, "values": values}
            write_atomic(path, json.dumps(doc, indent=2, sort_keys=True).encode("utf-8"))


def _value(raw: object) -> MetricValue:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int | float) and raw == raw and raw not in (float("inf"), float("-inf")):
        return float(raw)
    return None


async def _run(lifecycle: TaskLifecycle, tenant_id: str, worker_id: str, record: ExecutionRecord) -> RunRecord | None:
    try:
        return await lifecycle.get_run(RunRef(tenant_id, worker_id, record.run_id))
    except (TaskLifecycleError, ValueError, OSError):  # gone or unreadable: the execution record stands in
        return None
