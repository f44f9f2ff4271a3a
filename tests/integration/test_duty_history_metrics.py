"""Condition metrics upstream genworker computes from a duty's own history (error_rate, durations...):
WorkerMetrics reads them from the duty's execution records and their run records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.duties import DutyStore, WorkerMetrics
from genworker.autonomy.duties.store import ExecutionRecord
from genworker.worker.lifecycle.store import TaskStore
from genworker.worker.task import RunRecord, RunState, RunTimings

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def fired(store: DutyStore, n: int, state: str, run_ms: float | None, tasks: TaskStore) -> None:
    run_id = f"run-{n}"
    at = T0 + timedelta(hours=n)
    store.append(
        "acme",
        "alice",
        ExecutionRecord(
            duty_id="watch", trigger_id="t", trigger_type="condition", scheduled_for=at, key=None,
            run_id=run_id, state="running", fired_at=at,
        ),
        timedelta(days=30),
    )  # fmt: skip
    if run_ms is not None:  # the run record has the final state and how long it ran
        timings = RunTimings(queued_at=at, started_at=at, finished_at=at, run_ms=run_ms)
        tasks.create_run(RunRecord(run_id, f"task-{n}", "acme", "alice", RunState(state), timings))


async def test_history_metrics_of_a_duty(tmp_path: Path) -> None:
    store, tasks = DutyStore(tmp_path), TaskStore(tmp_path)
    metrics = WorkerMetrics(tmp_path)
    assert await metrics.read("acme", "alice", "error_rate", "watch") is None  # no runs yet: unknown
    fired(store, 1, "completed", 2000.0, tasks)
    fired(store, 2, "failed", 4000.0, tasks)
    fired(store, 3, "budget_exceeded", 3000.0, tasks)
    fired(store, 4, "completed", 1000.0, tasks)
    assert await metrics.read("acme", "alice", "error_rate", "watch") == 0.5
    assert await metrics.read("acme", "alice", "failure_rate", "watch") == 0.5
    assert await metrics.read("acme", "alice", "failure_count", "watch") == 2.0
    assert await metrics.read("acme", "alice", "avg_duration", "watch") == 2.5
    assert await metrics.read("acme", "alice", "last_duration_seconds", "watch") == 1.0
    assert await metrics.read("acme", "alice", "anomaly_count", "watch") is None  # not recorded here
    assert await metrics.read("acme", "alice", "error_rate") is None  # no duty: a reported metric of that name


async def test_only_the_last_20_runs_count(tmp_path: Path) -> None:
    store, tasks = DutyStore(tmp_path), TaskStore(tmp_path)
    for n in range(5):
        fired(store, n, "failed", 1000.0, tasks)
    for n in range(5, 25):
        fired(store, n, "completed", 1000.0, tasks)
    assert await WorkerMetrics(tmp_path).read("acme", "alice", "failure_count", "watch") == 0.0
