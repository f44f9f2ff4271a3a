"""Two runtime processes on one workspace and one Redis split the workers' autonomy: each worker's
heartbeat, duty schedule and briefs run in exactly one of them, and move to the other when it
stops (runtime/scope.py over cluster/ownership.py). Both runtimes run in this test's process, each
with its own instance lease, Redis clients and schedulers, as two processes would have."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from genworker.autonomy.heartbeat.scheduler import job_id
from genworker.cluster.ownership import CLAIM_PREFIX
from genworker.runtime.composition import Runtime, build_runtime
from genworker.settings import load_settings
from genworker.worker.lifecycle.leases import REDIS_PREFIX

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

WORKERS = [f"w{i}" for i in range(8)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _forget_instances(url: str) -> None:
    """Leases and claims of runtimes earlier tests left to expire would count as live here."""
    with redis.Redis.from_url(url) as client:
        for pattern in (f"{REDIS_PREFIX}*", f"{CLAIM_PREFIX}*"):
            keys = list(client.scan_iter(match=pattern))
            if keys:
                client.delete(*keys)


def _heartbeats(runtime: Runtime) -> set[str]:
    return set(runtime.services.heartbeat.scheduler.jobs())


async def test_each_worker_runs_in_one_process_and_moves_when_that_process_stops(
    tmp_path: Path, small_workspace: Callable[..., Path], redis_url: str
) -> None:
    _forget_instances(redis_url)
    workspace = small_workspace({"acme": WORKERS})
    (tmp_path / "configs").mkdir()
    env = {"GENWORKER_HOT_RELOAD": "false", "REDIS_URL": redis_url, "GENWORKER_PROFILE": "shared"}
    settings = load_settings(tmp_path / "configs", env, workspace=workspace)
    every = {job_id("acme", w) for w in WORKERS}

    first = await asyncio.to_thread(build_runtime, settings)
    second = await asyncio.to_thread(build_runtime, settings)
    await first.start()
    try:
        assert _heartbeats(first) == every  # alone, it runs every worker's autonomy
        await second.start()
        # the second sees both instances; the first learns of it at its next beat and gives up the
        # workers the hash now gives the second, whose next beat takes them
        await first.beat_ownership(first.services.scope)
        await second.beat_ownership(second.services.scope)
        here, there = _heartbeats(first), _heartbeats(second)
        assert here | there == every and not here & there  # each worker in exactly one process
        assert here and there  # 8 workers over 2 instances: both get some (fixed by the ids' hashes)
        assert {f"acme/{w}" for w in WORKERS} == first.services.scope.ownership.held | (  # type: ignore[union-attr]
            second.services.scope.ownership.held  # type: ignore[union-attr]
        )
        assert first.services.scope.workers() != second.services.scope.workers()
    except BaseException:
        await second.stop()
        raise
    finally:
        await first.stop()  # releases its lease and its claims at once: no wait for expiry
    try:
        await second.beat_ownership(second.services.scope)
        assert _heartbeats(second) == every  # taken over within one beat
        assert second.debug()["autonomy_scope"]["live_instances"] == [second.services.leases.instance_id]
    finally:
        await second.stop()
    with redis.Redis.from_url(redis_url) as client:
        assert not list(client.scan_iter(match=f"{CLAIM_PREFIX}*"))  # nothing left held


async def test_a_single_process_runs_every_workers_autonomy_without_claims(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    workspace = small_workspace({"acme": WORKERS[:3]})
    (tmp_path / "configs").mkdir()
    settings = load_settings(tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=workspace)
    runtime = await asyncio.to_thread(build_runtime, settings)
    await runtime.start()
    try:
        assert runtime.services.scope.ownership is None
        assert _heartbeats(runtime) == {job_id("acme", w) for w in WORKERS[:3]}
    finally:
        await runtime.stop()
