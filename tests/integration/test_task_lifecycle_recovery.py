"""Start-up recovery: runs left running or evaluating become interrupted, nothing is replayed,
queued and waiting runs are left alone, half-finished moves are completed."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genworker.engine.base import RunResult
from genworker.tools.base import ToolCall
from genworker.worker.lifecycle import RESTART_NOTE, IllegalTransition, TaskLifecycle, recover_interrupted
from genworker.worker.task import RunError, RunRecord, RunRef, RunState, TaskManifest

pytestmark = pytest.mark.anyio

S = RunState


def manifest(run_id: str, tenant: str = "acme", worker: str = "w") -> TaskManifest:
    return TaskManifest(f"task-{run_id}", run_id, tenant, worker, "work", datetime(2025, 3, 1, tzinfo=UTC))


async def run_in(lifecycle: TaskLifecycle, state: RunState, run_id: str, tenant: str = "acme") -> RunRecord:
    run = await lifecycle.persist_initial(manifest(run_id, tenant))
    ref = run.ref
    if state is S.QUEUED:
        return run
    run = await lifecycle.start(ref)
    match state:
        case S.RUNNING:
            return run
        case S.EVALUATING:
            return await lifecycle.evaluate(ref)
        case S.WAITING_APPROVAL:
            return await lifecycle.wait_approval(ref, ToolCall("c1", "send"))
        case S.PAUSED:
            return await lifecycle.pause(ref)
        case S.COMPLETED:
            return await lifecycle.complete(ref, RunResult("completed", "ok"))
        case S.FAILED:
            return await lifecycle.fail(ref, "boom")
    raise AssertionError(state)


def task_file(root: Path, run: RunRecord, folder: str) -> Path:
    return root / "tenants" / run.tenant_id / "workers" / run.worker_id / "tasks" / folder / f"{run.task_id}.json"


async def test_restart_interrupts_running_runs_only(tmp_path: Path) -> None:
    before = TaskLifecycle(tmp_path)  # the process that "crashed"
    runs = {
        state: await run_in(before, state, state.value.replace("_", "-"), tenant)
        for state, tenant in [
            (S.QUEUED, "acme"),
            (S.RUNNING, "acme"),
            (S.EVALUATING, "globex"),
            (S.WAITING_APPROVAL, "acme"),
            (S.PAUSED, "globex"),
            (S.COMPLETED, "acme"),
            (S.FAILED, "globex"),
        ]
    }

    recovered = await recover_interrupted(tmp_path)

    assert sorted(recovered, key=str) == sorted([runs[S.RUNNING].ref, runs[S.EVALUATING].ref], key=str)
    after = TaskLifecycle(tmp_path)
    for state in (S.RUNNING, S.EVALUATING):
        run = await after.get_run(runs[state].ref)
        assert run.state is S.INTERRUPTED
        assert run.error == RunError("runtime_restarted", RESTART_NOTE)
        assert (run.history[-1].source, run.history[-1].note) == (state, RESTART_NOTE)
        assert run.timings.finished_at is not None
        assert task_file(tmp_path, run, "done").is_file() and not task_file(tmp_path, run, "active").exists()
    for state in (S.QUEUED, S.WAITING_APPROVAL, S.PAUSED, S.COMPLETED, S.FAILED):
        assert await after.get_run(runs[state].ref) == runs[state]  # untouched, same version
    assert task_file(tmp_path, runs[S.QUEUED], "active").is_file()

    assert await recover_interrupted(tmp_path) == []  # a second start-up finds nothing to do


async def test_interrupted_runs_are_never_replayed(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    run = await run_in(lifecycle, S.RUNNING, "r1")
    await recover_interrupted(tmp_path)
    for command in (lifecycle.start, lifecycle.resume):
        with pytest.raises(IllegalTransition, match="from interrupted to running"):
            await command(run.ref)


async def test_a_move_cut_short_by_a_crash_is_finished(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    run = await run_in(lifecycle, S.COMPLETED, "r1")
    # the crash happened after the run was written and before its manifest was moved
    task_file(tmp_path, run, "done").replace(task_file(tmp_path, run, "active"))
    assert await recover_interrupted(tmp_path) == []
    assert task_file(tmp_path, run, "done").is_file() and not task_file(tmp_path, run, "active").exists()


async def test_unreadable_runs_are_logged_and_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    good = await run_in(lifecycle, S.RUNNING, "r1")
    bad = tmp_path / "tenants" / "acme" / "workers" / "w" / "runs" / "r0.json"
    bad.write_text('{"schema_version": 7}', encoding="utf-8")
    (tmp_path / "tenants" / "acme" / "workers" / "not a valid id").mkdir()
    with caplog.at_level(logging.ERROR, logger="genworker.worker.lifecycle"):
        recovered = await recover_interrupted(tmp_path)
    assert recovered == [good.ref]
    assert any(str(bad) in r.getMessage() and "schema_version 7" in r.getMessage() for r in caplog.records)


async def test_an_empty_workspace_recovers_nothing(tmp_path: Path) -> None:
    assert await recover_interrupted(tmp_path / "missing") == []


async def test_recovery_uses_the_given_clock(tmp_path: Path) -> None:
    later = datetime(2030, 1, 1, tzinfo=UTC)
    run = await run_in(TaskLifecycle(tmp_path), S.RUNNING, "r1")
    await recover_interrupted(tmp_path, clock=lambda: later)
    recovered = await TaskLifecycle(tmp_path).get_run(RunRef("acme", "w", run.run_id))
    assert recovered.timings.finished_at == later
