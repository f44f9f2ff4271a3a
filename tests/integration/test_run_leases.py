"""Several runtime processes on one workspace: runs carry their owner's instance id, recovery
interrupts only runs whose owner lost its lease, and a side-effecting call that started and never
finished is recorded as `outcome_unknown` (never retried)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.autonomy.waiting import WaitingPlan
from genworker.engine.base import RunResult
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.tools.base import Effect, ToolCall
from genworker.tools.context import ToolScope
from genworker.tools.journal import Journaling, StepJournal
from genworker.tools.outcomes import ToolCompleted
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.leases import FileInstanceLeases, RedisInstanceLeases
from genworker.worker.task import RunState, TaskManifest

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def manifest(run_id: str) -> TaskManifest:
    return TaskManifest(f"task-{run_id}", run_id, "acme", "w", "work", T0)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_file_leases_expire_without_renewal(tmp_path: Path) -> None:
    clock = Clock()
    mine = FileInstanceLeases(tmp_path, ttl=timedelta(seconds=30), clock=clock)
    other = FileInstanceLeases(tmp_path, clock=clock)
    assert not other.alive(mine.instance_id)  # no lease yet
    mine.renew()
    assert other.alive(mine.instance_id)
    clock.now += timedelta(seconds=31)
    assert not other.alive(mine.instance_id)  # stopped renewing: dead
    mine.renew()
    assert other.alive(mine.instance_id)
    mine.release()
    assert not other.alive(mine.instance_id)
    assert not other.alive("../escape")  # a forged owner id is simply not alive


def test_a_file_lease_whose_process_exited_is_dead_before_it_expires(tmp_path: Path) -> None:
    """A crash (SIGKILL) leaves an unexpired lease; its process being gone from this host is enough."""
    script = (
        "import sys; from pathlib import Path; from genworker.worker.lifecycle.leases import FileInstanceLeases\n"
        "lease = FileInstanceLeases(Path(sys.argv[1])); lease.renew(); print(lease.instance_id, flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        encoding="utf-8",
    )
    assert child.stdout is not None
    instance_id = child.stdout.readline().strip()
    mine = FileInstanceLeases(tmp_path)
    assert mine.alive(instance_id)  # running
    child.kill()
    child.communicate(timeout=30)
    assert not mine.alive(instance_id)  # its lease has most of its 30 s left, but nobody holds it
    lease = json.loads((tmp_path / "runtime" / "instances" / f"{instance_id}.json").read_text(encoding="utf-8"))
    assert datetime.fromisoformat(lease["expires_at"]) > datetime.now(UTC)


def test_redis_leases(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        mine = RedisInstanceLeases(client, ttl=timedelta(seconds=30))
        other = RedisInstanceLeases(client)
        assert not other.alive(mine.instance_id)
        mine.renew()
        assert other.alive(mine.instance_id)
        assert 0 < client.pttl(f"genworker:instance:{mine.instance_id}") <= 30_000  # Redis expires it on its own
        mine.release()
        assert not other.alive(mine.instance_id)
    finally:
        client.close()


async def test_a_second_process_leaves_live_runs_alone(tmp_path: Path) -> None:
    clock = Clock()
    a_lease = FileInstanceLeases(tmp_path, clock=clock)
    b_lease = FileInstanceLeases(tmp_path, clock=clock)
    a_lease.renew()
    b_lease.renew()
    a = TaskLifecycle(tmp_path, owner=a_lease.instance_id, clock=clock)
    b = TaskLifecycle(tmp_path, owner=b_lease.instance_id, clock=clock)
    run = await a.persist_initial(manifest("r1"), start=True)
    legacy = await TaskLifecycle(tmp_path, clock=clock).persist_initial(manifest("r0"), start=True)  # no owner
    assert run.owner == a_lease.instance_id and legacy.owner is None

    assert await b.recover_interrupted(alive=b_lease.alive) == [legacy.ref]  # b starts: a is alive
    assert (await b.get_run(run.ref)).state is RunState.RUNNING
    assert await b.recover_orphans(b_lease.alive) == []

    clock.now += timedelta(seconds=31)  # a died: its lease ran out; b keeps renewing
    b_lease.renew()
    assert await b.recover_orphans(b_lease.alive) == [run.ref]
    interrupted = await b.get_run(run.ref)
    assert interrupted.state is RunState.INTERRUPTED and interrupted.error is not None
    assert interrupted.error.code == "runtime_restarted"
    own = await b.persist_initial(manifest("r2"), start=True)
    assert await b.recover_orphans(b_lease.alive) == []  # its own runs are never orphans
    assert (await b.get_run(own.ref)).state is RunState.RUNNING


async def test_resume_takes_ownership(tmp_path: Path) -> None:
    a = TaskLifecycle(tmp_path, owner="rt_a")
    run = await a.persist_initial(manifest("r1"), start=True)
    await a.wait_approval(run.ref, ToolCall("c1", "send"))
    resumed = await TaskLifecycle(tmp_path, owner="rt_b").resume(run.ref, approval_ref="cf_1")
    assert resumed.owner == "rt_b"


def sending_pipeline(journal: StepJournal, sent: list[str], *, hang: asyncio.Event | None = None) -> ToolPipeline:
    @function_tool(effect=Effect.EXTERNAL)
    async def send_mail(to: str) -> str:
        """Send a mail.

        Args:
            to: the address
        """
        sent.append(to)
        if hang is not None:
            hang.set()
            await asyncio.Event().wait()  # the process dies here: the call never returns
        return "sent"

    @function_tool(effect=Effect.READ)
    async def read_inbox() -> str:
        """Read the inbox."""
        return "empty"

    return ToolPipeline([send_mail, read_inbox], middlewares=(Journaling(journal),))


def scope(root: Path, run_id: str) -> ToolScope:
    return ToolScope(tenant_id="acme", worker_id="w", run_id=run_id, worker_dir=root, trust_level=3)


async def test_a_call_that_never_finished_is_outcome_unknown(tmp_path: Path) -> None:
    journal, sent = StepJournal(tmp_path), []
    crashed = TaskLifecycle(tmp_path, owner="rt_dead")
    run = await crashed.persist_initial(manifest("r1"), start=True)
    ok = await sending_pipeline(journal, sent).execute(scope(tmp_path, "r1"), ToolCall("c0", "read_inbox", {}))
    assert isinstance(ok, ToolCompleted) and ok.result.content == "empty"
    assert journal.unfinished("acme", "w", "r1") == []  # read-only calls are not journaled
    mail = ToolCall("c1", "send_mail", {"to": "a@x"})
    done = await sending_pipeline(journal, sent).execute(scope(tmp_path, "r1"), mail)
    assert isinstance(done, ToolCompleted) and sent == ["a@x"]
    assert journal.unfinished("acme", "w", "r1") == []  # started and finished
    hung = asyncio.Event()
    pipeline = sending_pipeline(journal, sent, hang=hung)
    call = asyncio.create_task(pipeline.execute(scope(tmp_path, "r1"), ToolCall("c2", "send_mail", {"to": "b@x"})))
    await asyncio.wait_for(hung.wait(), 10)
    call.cancel()  # what is left of a process that died mid-call
    with pytest.raises(asyncio.CancelledError):
        await call
    assert [(s.call_id, s.tool) for s in journal.unfinished("acme", "w", "r1")] == [("c2", "send_mail")]

    recovered = await TaskLifecycle(tmp_path, owner="rt_new").recover_interrupted(alive=lambda owner: False)
    assert recovered == [run.ref]
    after = await TaskLifecycle(tmp_path).get_run(run.ref)
    assert after.state is RunState.INTERRUPTED and after.error is not None
    assert after.error.code == "outcome_unknown" and "send_mail (c2)" in after.error.message
    assert [(c.call_id, c.outcome) for c in after.tool_calls][-1] == ("c2", "outcome_unknown")
    assert sent == ["a@x", "b@x"]  # nothing was replayed
    assert not journal.path("acme", "w", "r1").exists()  # the journal ends with the run


async def test_a_run_that_ends_drops_its_journal(tmp_path: Path) -> None:
    journal, sent = StepJournal(tmp_path), []
    lifecycle = TaskLifecycle(tmp_path, owner="rt_a")
    run = await lifecycle.persist_initial(manifest("r1"), start=True)
    await sending_pipeline(journal, sent).execute(scope(tmp_path, "r1"), ToolCall("c1", "send_mail", {"to": "a@x"}))
    assert journal.path("acme", "w", "r1").exists()
    await lifecycle.complete(run.ref, RunResult("completed", "done"))
    assert not journal.path("acme", "w", "r1").exists()


def test_two_runtimes_on_one_workspace(small_workspace: Callable[..., Path], tmp_path: Path) -> None:
    """Runtime B starting on A's workspace leaves A's running run and WAITING resume alone; once A
    stops, B's lease sweep interrupts the run and restarts the resume."""
    workspace = small_workspace({"acme": ["w"]})
    (tmp_path / "configs").mkdir()
    env = {"GENWORKER_HOT_RELOAD": "false"}

    def app() -> TestClient:
        return TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace)))

    a_client: TestClient | None = app().__enter__()
    try:
        a: Runtime = a_client.app.state.runtime  # type: ignore[attr-defined]
        sa = a.services
        run = a_client.portal.call(lambda: sa.router.tasks.persist_initial(manifest("r1"), start=True))  # type: ignore[union-attr]
        assert run.owner == sa.leases.instance_id
        now = datetime.now(UTC)
        parked = WaitingPlan(plan_id="wait_1", tenant_id="acme", worker_id="w", match_key="ci:build:7:done",
                             created_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip
        store = sa.waiting.store

        async def resumed_by_a() -> None:  # A took the plan's event and started its resume
            await store.add(parked)
            await store.transition("acme", "w", "wait_1", "waiting", "gated", now=now)
            await store.transition("acme", "w", "wait_1", "gated", "running", now=now, resumed_by=sa.leases.instance_id)  # type: ignore[union-attr]

        a_client.portal.call(resumed_by_a)
        with app() as b_client:
            b: Runtime = b_client.app.state.runtime  # type: ignore[attr-defined]
            sb = b.services
            assert sb.leases.instance_id != sa.leases.instance_id
            assert b_client.portal.call(lambda: sb.router.tasks.get_run(run.ref)).state is RunState.RUNNING  # type: ignore[union-attr]
            b_client.portal.call(lambda: b.sweep_stopped_instances(sb.leases))  # type: ignore[arg-type]
            assert b_client.portal.call(lambda: sb.waiting.store.get("acme", "w", "wait_1")).state == "running"  # type: ignore[union-attr]
            a_client.__exit__(None, None, None)  # A stops: its lease is released
            a_client = None
            b_client.portal.call(lambda: b.sweep_stopped_instances(sb.leases))  # type: ignore[arg-type]
            assert b_client.portal.call(lambda: sb.router.tasks.get_run(run.ref)).state is RunState.INTERRUPTED  # type: ignore[union-attr]
            b_client.portal.call(lambda: sb.waiting.wait_runs([parked]))  # type: ignore[union-attr]
            # restarted by B (no model here, so its continuation fails; the plan ends either way)
            assert b_client.portal.call(lambda: sb.waiting.store.get("acme", "w", "wait_1")).state == "done"  # type: ignore[union-attr]
    finally:
        if a_client is not None:
            a_client.__exit__(None, None, None)
