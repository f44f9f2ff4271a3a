"""Two runtimes on one workspace and one Redis (issue #30, docs/deploy.md): the WAITING timeout scan
and the sensors run only for the workers whose autonomy a runtime owns, and move with them: the
plans of a worker time out in its owner only, and its sensor goes on in the next owner from the
cursor the last one saved (no fact twice, none skipped). Both runtimes run in this test's process,
each with its own instance lease, Redis clients and schedulers, as two processes would have."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.conftest import persona_md
from tests.integration.test_worker_ownership import _forget_instances

from genworker.autonomy.waiting import WaitingPlan
from genworker.runtime.composition import Runtime, build_runtime
from genworker.settings import load_settings

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

WORKERS = [f"w{i}" for i in range(8)]
SENSOR = (
    "sensor_configs:\n  - {source_type: workspace_file, sensor_id: drop, poll_interval: 1h, filter: {path: drop}}\n"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def owned(runtime: Runtime, tenant: str) -> set[str]:
    return {w for w in WORKERS if runtime.services.scope.runs_here(tenant, w)}


def timeouts_of(runtime: Runtime, seen: list[tuple[str, str]], all_seen: asyncio.Event) -> None:
    """Record in `seen` each plan the runtime's scan times out, as (this runtime's id, worker)."""
    me = runtime.services.leases.instance_id

    async def record(plan: WaitingPlan, _outcome: str) -> None:
        seen.append((me, plan.worker_id))
        if len(seen) >= len(WORKERS):
            all_seen.set()

    runtime.services.waiting.on_timeout = record


async def test_timeouts_and_sensors_run_in_the_owner_and_move_with_the_worker(
    tmp_path: Path, small_workspace: Callable[..., Path], redis_url: str
) -> None:
    _forget_instances(redis_url)
    tenant = f"handover{uuid.uuid4().hex[:8]}"  # its plans and inbox items are this test's alone
    extra = {f"tenants/{tenant}/workers/{w}/PERSONA.md": persona_md(w, extra=SENSOR) for w in WORKERS}
    extra |= {f"tenants/{tenant}/workers/{w}/drop/.keep": "" for w in WORKERS}  # hidden: never reported
    workspace = small_workspace({tenant: WORKERS}, extra)
    (tmp_path / "configs").mkdir()
    env = {"GENWORKER_HOT_RELOAD": "false", "REDIS_URL": redis_url, "GENWORKER_PROFILE": "shared"}
    settings = load_settings(tmp_path / "configs", env, workspace=workspace)

    first = await asyncio.to_thread(build_runtime, settings)
    second = await asyncio.to_thread(build_runtime, settings)
    await first.start()
    try:
        await second.start()
        await first.beat_ownership(first.services.scope)
        await second.beat_ownership(second.services.scope)
        here, there = owned(first, tenant), owned(second, tenant)
        assert here | there == set(WORKERS) and not here & there and here and there
        # sensors: each worker's runner in its owner only
        assert {w for w in WORKERS if first.services.sensors.runner(tenant, w)} == here
        assert {w for w in WORKERS if second.services.sensors.runner(tenant, w)} == there

        # WAITING: a due plan per worker times out in the worker's owner, once
        seen: list[tuple[str, str]] = []
        all_seen = asyncio.Event()
        for runtime in (first, second):
            timeouts_of(runtime, seen, all_seen)
        now = datetime.now(UTC)
        for w in WORKERS:
            plan = WaitingPlan(plan_id=f"p-{w}", tenant_id=tenant, worker_id=w, match_key="github:issue:1:updated",
                               created_at=now - timedelta(hours=2), expires_at=now - timedelta(hours=1),
                               on_timeout="escalate")  # fmt: skip
            await first.services.waiting.store.add(plan)
        await second.services.waiting.scan_once()
        await first.services.waiting.scan_once()
        await asyncio.wait_for(all_seen.wait(), 10)  # a scan loop may have been first: either way, once
        ids = first.services.leases.instance_id, second.services.leases.instance_id
        assert sorted(seen) == sorted([(ids[0], w) for w in here] + [(ids[1], w) for w in there])

        # a sensor of a worker the first owns: polled there, then in the second from the same cursor
        worker = sorted(here)[0]
        drops = workspace / "tenants" / tenant / "workers" / worker / "drop"
        runner = first.services.sensors.runner(tenant, worker)
        assert runner is not None
        await runner.poll_now("drop")  # the baseline (or nothing new after the loop's)
        (drops / "a.txt").write_text("a", encoding="utf-8")
        assert [item.payload["path"] for item in await runner.poll_now("drop")] == ["a.txt"]
    except BaseException:
        await second.stop()
        raise
    finally:
        await first.stop()  # its sensors stop, then its claims go at once
    try:
        (drops / "b.txt").write_text("b", encoding="utf-8")
        await second.beat_ownership(second.services.scope)
        assert owned(second, tenant) == set(WORKERS)
        taken = second.services.sensors.runner(tenant, worker)
        assert taken is not None
        await taken.poll_now("drop")  # after the loop's first poll, if that came first: b.txt is in either way
        items = await second.services.inbox.list(tenant, worker)
        assert sorted(item.payload["path"] for item in items) == ["a.txt", "b.txt"]
    finally:
        await second.stop()
