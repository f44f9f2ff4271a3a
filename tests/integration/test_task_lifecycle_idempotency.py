"""Idempotent task creation under contention: threads, the event loop and separate processes race
`persist_initial` with one key, and exactly one run exists afterwards (GoodBuddy §7.4)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.store import IdempotencyClaim, TaskStore
from genworker.worker.task import RunRecord, TaskManifest, TaskProvenance, schedule_idempotency_key

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
KEY = schedule_idempotency_key("daily-report", T0, 3)


def manifest(i: int, key: str | None = KEY, worker: str = "w") -> TaskManifest:
    provenance = TaskProvenance(source_type="schedule", scheduled_for=T0, idempotency_key=key)
    return TaskManifest(f"t{i}", f"r{i}", "acme", worker, "daily report", T0, provenance=provenance)


def files(root: Path, folder: str, worker: str = "w") -> list[str]:
    path = root / "tenants" / "acme" / "workers" / worker / folder
    return sorted(p.name for p in path.iterdir() if p.is_file() and not p.name.startswith("."))


async def test_same_key_returns_the_existing_run(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    first = await lifecycle.persist_initial(manifest(1))
    again = await lifecycle.persist_initial(manifest(2))
    assert again == first and again.run_id == "r1"
    assert files(tmp_path, "runs") == ["r1.json"]
    assert files(tmp_path, "tasks/active") == ["t1.json"]


async def test_the_key_holds_after_the_run_finished(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    first = await lifecycle.persist_initial(manifest(1))
    await lifecycle.cancel(first.ref)
    again = await lifecycle.persist_initial(manifest(2))
    assert again.run_id == "r1" and again.state.value == "cancelled"


async def test_other_keys_and_other_workers_get_their_own_runs(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    next_version = schedule_idempotency_key("daily-report", T0, 4)
    runs = [
        await lifecycle.persist_initial(manifest(1)),
        await lifecycle.persist_initial(manifest(2, next_version)),
        await lifecycle.persist_initial(manifest(3, None)),
        await lifecycle.persist_initial(manifest(4, worker="other")),
    ]
    assert [r.run_id for r in runs] == ["r1", "r2", "r3", "r4"]


async def test_a_stale_claim_left_by_a_crash_is_taken_over(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    store.claim_idempotency("acme", "w", IdempotencyClaim(KEY, "r-crashed", "t-crashed", T0))
    run = await TaskLifecycle(tmp_path).persist_initial(manifest(1))
    assert run.run_id == "r1"
    claim = store.read_claim("acme", "w", KEY)
    assert claim is not None and claim.run_id == "r1"


async def test_a_failed_create_releases_the_claim(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    await lifecycle.persist_initial(manifest(1, key=None))
    with pytest.raises(Exception, match="already exists"):
        await lifecycle.persist_initial(manifest(1))  # same run id, fresh key
    assert TaskStore(tmp_path).read_claim("acme", "w", KEY) is None


def assert_one_run(root: Path, runs: list[RunRecord]) -> None:
    assert len({r.run_id for r in runs}) == 1, [r.run_id for r in runs]
    (winner,) = {r.run_id for r in runs}
    assert files(root, "runs") == [f"{winner}.json"]
    assert files(root, "tasks/active") == [f"t{winner.removeprefix('r')}.json"]
    assert files(root, "runs/_idempotency") == [f"{TaskStore(root).claim_path('acme', 'w', KEY).name}"]


def test_racing_threads_create_one_run(tmp_path: Path) -> None:
    count = 12
    barrier = threading.Barrier(count, timeout=30)
    results: list[RunRecord] = []
    errors: list[BaseException] = []

    def submit(i: int) -> None:
        lifecycle = TaskLifecycle(tmp_path)  # its own instance, as in another request handler
        try:
            barrier.wait()
            results.append(asyncio.run(lifecycle.persist_initial(manifest(i))))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and len(results) == count
    assert_one_run(tmp_path, results)


async def test_gathered_calls_create_one_run(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path)
    runs = await asyncio.gather(*(lifecycle.persist_initial(manifest(i)) for i in range(16)))
    assert_one_run(tmp_path, list(runs))


CHILD = """
import asyncio, sys
from datetime import UTC, datetime
from pathlib import Path
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import TaskManifest, TaskProvenance

root, i, key = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
t0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
m = TaskManifest(f"t{i}", f"r{i}", "acme", "w", "daily report", t0, provenance=TaskProvenance(idempotency_key=key))
print("ready", flush=True)
sys.stdin.readline()
print(asyncio.run(TaskLifecycle(root).persist_initial(m)).run_id, flush=True)
"""


def test_racing_processes_create_one_run(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path), str(i), KEY],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        for i in range(6)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:  # release them together
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [proc.communicate(timeout=60)[0].strip() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0] * len(procs)
    assert len(set(outputs)) == 1, outputs
    (winner,) = set(outputs)
    assert files(tmp_path, "runs") == [f"{winner}.json"]
    assert files(tmp_path, "tasks/active") == [f"t{winner.removeprefix('r')}.json"]


async def test_an_interrupted_run_can_free_its_key_to_run_again_once(tmp_path: Path) -> None:
    lifecycle = TaskLifecycle(tmp_path, owner="rt_dead")
    first = await lifecycle.persist_initial(manifest(1), start=True)
    assert not await lifecycle.release_interrupted("acme", "w", KEY, first.run_id)  # still running: kept
    after_restart = TaskLifecycle(tmp_path, owner="rt_new")
    assert await after_restart.recover_interrupted() == [first.ref]
    assert not await after_restart.release_interrupted("acme", "w", KEY, "r-other")  # not the key's run
    assert await after_restart.release_interrupted("acme", "w", KEY, first.run_id)
    again = await after_restart.persist_initial(manifest(2), start=True)
    assert again.run_id == "r2" and again.provenance.idempotency_key == KEY
    assert (await after_restart.persist_initial(manifest(3))).run_id == "r2"  # the key holds the new run
    assert not await after_restart.release_interrupted("acme", "w", KEY, first.run_id)  # the old run: no longer
    assert (await after_restart.get_run(first.ref)).state.value == "interrupted"  # history kept
