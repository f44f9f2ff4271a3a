"""The WAITING timeout scan of one process: only the plans of the workers whose autonomy runs there
(issue #30, docs/deploy.md), on both backends; and a scan loop that always ends when cancelled."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.waiting import FileWaitingStore, RedisWaitingStore, WaitingPlan, WaitingService, WaitingStore

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def plan(plan_id: str, worker: str, tenant: str = "acme") -> WaitingPlan:
    return WaitingPlan(plan_id=plan_id, tenant_id=tenant, worker_id=worker, match_key="github:issue:1:updated",
                       created_at=T0, expires_at=T0 + timedelta(minutes=5), on_timeout="escalate")  # fmt: skip


@pytest.fixture(params=["file", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[WaitingStore]:
    made: WaitingStore
    if request.param == "redis":
        made = RedisWaitingStore(request.getfixturevalue("redis_url"), prefix=f"test-{uuid.uuid4().hex[:8]}")
    else:
        made = FileWaitingStore(tmp_path / "ws")
    yield made
    await made.aclose()


async def test_the_scan_times_out_only_the_plans_of_the_workers_it_is_given(store: WaitingStore) -> None:
    for i, (tenant, worker) in enumerate([("acme", "mine"), ("acme", "theirs"), ("beta", "mine"), ("acme", "mine")]):
        await store.add(plan(f"p{i}", worker, tenant))
    here: Callable[[str, str], bool] = lambda tenant, worker: (tenant, worker) == ("acme", "mine")  # noqa: E731
    later = T0 + timedelta(minutes=6)
    assert await store.expire_due(T0, only=here) == []  # not due yet
    assert sorted(p.plan_id for p in await store.expire_due(later, only=here)) == ["p0", "p3"]
    assert await store.expire_due(later, only=here) == []  # once
    assert [p.plan_id for p in await store.expire_due(later, limit=1)] == ["p1"]  # the others stayed due
    assert [p.plan_id for p in await store.expire_due(later)] == ["p2"]
    assert {p.plan_id: p.state for p in await store.list("acme", "mine")} == {"p0": "gated", "p3": "gated"}


async def test_a_service_scans_the_workers_it_owns(store: WaitingStore) -> None:
    owned = {("acme", "mine")}
    service = WaitingService(store, lambda _plan: asyncio.sleep(0), clock=lambda: T0 + timedelta(minutes=6))
    await store.add(plan("a", "mine"))
    await store.add(plan("b", "theirs"))
    await service.start(only=lambda tenant, worker: (tenant, worker) in owned)
    try:
        await service.scan_once()  # the loop's first scan may have been first: either times "a" out
        assert [p.state for p in await store.list("acme", "mine")] == ["gated"]
        assert [p.state for p in await store.list("acme", "theirs")] == ["waiting"]
        owned.add(("acme", "theirs"))  # its owner stopped: the worker is this process's now
        assert [p.plan_id for p in await service.scan_once()] == ["b"]
    finally:
        await service.stop()


async def test_a_scan_loop_cancelled_as_it_is_stopped_ends_cancelled(store: WaitingStore) -> None:
    """On Python 3.11, asyncio.wait_for returns normally when its inner wait finishes in the step its
    caller is cancelled: a loop pausing in it swallowed the cancellation (tests/cluster could hang)."""
    scanned = asyncio.Event()

    class Watched(WaitingService):
        async def scan_once(self, limit: int = 1000, *, now: datetime | None = None) -> list[WaitingPlan]:
            handled = await super().scan_once(limit, now=now)
            scanned.set()  # the loop goes on to its pause in this same step
            return handled

    service = Watched(store, lambda _plan: asyncio.sleep(0), scan_interval_s=3600)
    await service.start()
    await asyncio.wait_for(scanned.wait(), 10)  # the loop now pauses for an hour
    loop = service._task
    assert loop is not None
    stopping = asyncio.create_task(service.stop())
    await asyncio.sleep(0)  # one step: stop() has woken the loop and waits for it
    loop.cancel()  # ... and someone cancels the loop in that same step
    await asyncio.wait_for(stopping, 10)
    assert loop.cancelled()


async def test_a_timeout_whose_scanner_died_midway_is_done_again_by_the_owner_in_a_sweep(store: WaitingStore) -> None:
    """A scan gates a due plan and then does its step (remind, escalate, close); when its process
    dies in between, the plan would stay GATED, out of the brief. The worker's owner does the step
    again at its next sweep for stopped instances, once."""
    outcomes: list[tuple[str, str]] = []

    async def told(plan: WaitingPlan, outcome: str) -> None:
        outcomes.append((plan.plan_id, outcome))

    owned = {("acme", "mine")}
    service = WaitingService(store, lambda _plan: asyncio.sleep(0), on_timeout=told, clock=lambda: T0, owner="rt_me")
    for plan_id, worker, on_timeout in [("remind", "mine", "remind"), ("shut", "mine", "close"),
                                        ("theirs", "theirs", "close"), ("esc", "mine", "escalate")]:  # fmt: skip
        await store.add(dataclasses.replace(plan(plan_id, worker), on_timeout=on_timeout))
    later = T0 + timedelta(minutes=6)
    gated = await store.expire_due(later, gater="rt_dead")  # ... and then its process died
    assert {p.gater for p in gated} == {"rt_dead"}
    dead: Callable[[str], bool] = lambda _instance: False  # noqa: E731
    workers = [("acme", "mine"), ("acme", "theirs")]
    await service.start(only=lambda tenant, worker: (tenant, worker) in owned)  # its loop finds nothing due at T0
    try:
        assert await service.recover(workers, dead) == []  # at start-up: left to the sweeps
        assert await service.recover(workers, lambda _instance: True, at_start=False) == []  # its scanner lives
        redone = await service.recover(workers, dead, at_start=False)
        assert sorted((p.plan_id, p.state) for p in redone) == [("esc", "gated"), ("remind", "waiting"),
                                                                ("shut", "closed")]  # fmt: skip
        assert await service.recover(workers, dead, at_start=False) == []  # once: escalated, it has no gater
    finally:
        await service.stop()
    assert sorted(outcomes) == [("esc", "escalate"), ("remind", "remind"), ("shut", "close")]
    assert [p.state for p in await store.list("acme", "theirs")] == ["gated"]  # its owner's to do
