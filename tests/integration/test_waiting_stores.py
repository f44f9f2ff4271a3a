"""WAITING plans against both backends (files, real Redis): the index, resume exactly once under
concurrent matching events, the timeout scan, state compare-and-set, and the service on a real
event bus."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.waiting import (
    FileWaitingStore,
    RedisWaitingStore,
    WaitingPlan,
    WaitingPlanNotFound,
    WaitingSchemaError,
    WaitingService,
    WaitingStore,
    WaitingTransitionError,
)
from genworker.bus import InProcessEventBus, new_event
from genworker.observability.metrics import REGISTRY
from genworker.workspace.models.base import thaw

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def plan(plan_id: str, key: str = "github:issue:42:updated", *, worker: str = "w", tenant: str = "acme",
         expires: timedelta = timedelta(hours=1), **fields: Any) -> WaitingPlan:  # fmt: skip
    return WaitingPlan(
        plan_id=plan_id, tenant_id=tenant, worker_id=worker, match_key=key, created_at=T0, expires_at=T0 + expires,
        **fields,
    )  # fmt: skip


@pytest.fixture(params=["file", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable[[], WaitingStore]]:
    """A factory: several store objects over the same backend, like several runtime processes."""
    made: list[WaitingStore] = []
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        prefix = f"test-{uuid.uuid4().hex[:8]}"

        def build() -> WaitingStore:
            made.append(RedisWaitingStore(url, prefix=prefix))
            return made[-1]
    else:

        def build() -> WaitingStore:
            made.append(FileWaitingStore(tmp_path / "ws"))
            return made[-1]

    yield build
    for store in made:
        await store.aclose()


async def test_add_is_idempotent_and_indexed_per_tenant_and_key(make_store: Callable[[], WaitingStore]) -> None:
    store = make_store()
    first = await store.add(plan("p1"))
    assert await store.add(plan("p1", title="again")) == first
    await store.add(plan("p2", "github:issue:43:updated"))
    await store.add(plan("p3", tenant="other"))
    assert [p.plan_id for p in await store.waiters("acme", "github:issue:42:updated")] == ["p1"]
    assert [p.plan_id for p in await store.waiters("other", "github:issue:42:updated")] == ["p3"]
    assert await store.waiters("acme", "github:issue:1:updated") == []
    assert [p.plan_id for p in await store.list("acme", "w")] == ["p1", "p2"]
    assert await store.get("acme", "w", "nope") is None


async def test_resume_wakes_each_plan_exactly_once_under_concurrent_events(
    make_store: Callable[[], WaitingStore],
) -> None:
    stores = [make_store() for _ in range(4)]
    for i in range(10):
        await stores[0].add(plan(f"p{i}", worker=f"w{i % 3}"))
    await stores[0].add(plan("other", "github:issue:7:updated"))
    calls = [s.resume("acme", "github:issue:42:updated", f"evt{n}", T0) for n in range(24) for s in stores[:1]]
    calls += [s.resume("acme", "github:issue:42:updated", f"evt-{i}", T0) for i, s in enumerate(stores)]
    results = await asyncio.gather(*calls)
    woken = [p for batch in results for p in batch]
    assert sorted(p.plan_id for p in woken) == [f"p{i}" for i in range(10)]
    assert {(p.state, p.gated_by, p.version) for p in woken} == {("gated", "event", 2)}
    assert len({p.event_id for p in woken}) == 1  # one event woke them all, together
    assert await stores[1].waiters("acme", "github:issue:42:updated") == []
    assert [p.plan_id for p in await stores[2].waiters("acme", "github:issue:7:updated")] == ["other"]
    # a later matching event finds nothing: no double wake-up
    assert await stores[3].resume("acme", "github:issue:42:updated", "late", T0) == []


async def test_timeout_scan_moves_only_expired_waits(make_store: Callable[[], WaitingStore]) -> None:
    store = make_store()
    await store.add(plan("soon", expires=timedelta(minutes=5)))
    await store.add(plan("same-minute", expires=timedelta(minutes=5, seconds=40)))
    await store.add(plan("later", expires=timedelta(hours=2)))
    await store.add(plan("elsewhere", tenant="other", expires=timedelta(minutes=1)))
    assert await store.expire_due(T0) == []
    due = await store.expire_due(T0 + timedelta(minutes=5, seconds=20))
    assert sorted(p.plan_id for p in due) == ["elsewhere", "soon"]
    assert {(p.state, p.gated_by) for p in due} == {("gated", "timeout")}
    assert await store.expire_due(T0 + timedelta(minutes=5, seconds=20)) == []  # once
    assert [p.plan_id for p in await store.expire_due(T0 + timedelta(minutes=6))] == ["same-minute"]
    assert [p.plan_id for p in await store.waiters("acme", "github:issue:42:updated")] == ["later"]
    # an expired plan is no longer woken by its event
    assert [p.plan_id for p in await store.resume("acme", "github:issue:42:updated", "e", T0)] == ["later"]


async def test_transition_is_compare_and_set_and_rearming_reindexes(make_store: Callable[[], WaitingStore]) -> None:
    store = make_store()
    await store.add(plan("p"))
    [_gated] = await store.resume("acme", "github:issue:42:updated", "e1", T0)
    results = await asyncio.gather(
        *(store.transition("acme", "w", "p", "gated", "running", now=T0) for _ in range(5)), return_exceptions=True
    )
    assert sum(isinstance(r, WaitingPlan) for r in results) == 1
    assert all(isinstance(r, WaitingTransitionError) for r in results if not isinstance(r, WaitingPlan))
    with pytest.raises(WaitingPlanNotFound):
        await store.transition("acme", "w", "missing", "gated", "running")
    await store.add(plan("again"))
    [_timed_out] = await store.expire_due(T0 + timedelta(hours=2))
    rearmed = await store.transition(
        "acme", "w", "again", "gated", "waiting", now=T0, expires_at=T0 + timedelta(hours=5), reminders=1
    )
    assert (rearmed.state, rearmed.reminders) == ("waiting", 1)
    assert [p.plan_id for p in await store.waiters("acme", "github:issue:42:updated")] == ["again"]
    assert await store.expire_due(T0 + timedelta(hours=3)) == []
    assert [p.plan_id for p in await store.expire_due(T0 + timedelta(hours=6))] == ["again"]


async def test_the_match_stores_the_payload_and_the_gater_as_it_gates(make_store: Callable[[], WaitingStore]) -> None:
    """The payload is on the plan as soon as it is GATED: a crash before its run loses nothing."""
    store = make_store()
    await store.add(plan("p"))
    payload = {"status": "grün", "jobs": [], "meta": {"tags": ["a"], "empty": {}, "n": 12345678901234567, "x": 0.1}}
    [gated] = await store.resume("acme", "github:issue:42:updated", "ev-1", T0, event=payload, gater="rt_a")
    stored = await make_store().get("acme", "w", "p")
    assert stored == gated and (gated.state, gated.event_id, gated.gater) == ("gated", "ev-1", "rt_a")
    assert thaw(gated.event) == payload
    await store.add(plan("quiet"))
    [timed_out] = await store.expire_due(T0 + timedelta(hours=2))
    assert (timed_out.plan_id, timed_out.event, timed_out.gater) == ("quiet", None, None)


async def test_the_file_backend_rejects_unknown_schema_versions(tmp_path: Path) -> None:
    store = FileWaitingStore(tmp_path)
    await store.add(plan("p"))
    path = tmp_path / "tenants/acme/workers/w/runtime/waiting/p.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema_version"] == 1
    path.write_text(json.dumps({**data, "schema_version": 99}), encoding="utf-8")
    with pytest.raises(WaitingSchemaError, match=r"p\.json: schema_version 99 is unknown"):
        await store.get("acme", "w", "p")


# -- the service over a real in-process bus ---------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.resumed: list[WaitingPlan] = []
        self.timeouts: list[tuple[str, str]] = []
        self.seen = asyncio.Event()

    async def resume(self, plan: WaitingPlan) -> None:
        self.resumed.append(plan)
        self.seen.set()

    async def timeout(self, plan: WaitingPlan, outcome: str) -> None:
        self.timeouts.append((plan.plan_id, outcome))


async def test_service_resumes_from_bus_events_once(make_store: Callable[[], WaitingStore]) -> None:
    bus = InProcessEventBus()
    rec = Recorder()
    now = [T0]
    services = [
        WaitingService(make_store(), rec.resume, on_timeout=rec.timeout, bus=bus, clock=lambda: now[0])
        for _ in range(2)
    ]
    for service in services:
        await service.start()
    try:
        parked = await services[0].wait("acme", "w", "github:pr:9:reviewed", resume={"text": "merge it"})
        assert parked.state == "waiting" and parked.expires_at == T0 + timedelta(hours=24)
        for _ in range(3):
            await bus.publish(
                new_event(
                    "github.pr", source="webhook", tenant_id="acme", payload={"match_key": "github:pr:9:reviewed"}
                )
            )
        await asyncio.wait_for(rec.seen.wait(), 10)
        await bus.close()  # drains the mailboxes: every handler has run
        for service in services:
            await service.wait_runs([parked])
        done = await services[1].store.get("acme", "w", parked.plan_id)
        assert done is not None and (done.state, done.event_id is not None) == ("done", True)
        assert done.event == {"match_key": "github:pr:9:reviewed"}  # the payload, for the resumed run
        assert [(p.plan_id, p.state, dict(p.resume)) for p in rec.resumed] == [
            (parked.plan_id, "running", {"text": "merge it"})
        ]
    finally:
        for service in services:
            await service.stop()


async def test_service_timeouts_remind_then_escalate_and_confirmations_wait(
    make_store: Callable[[], WaitingStore],
) -> None:
    rec = Recorder()
    now = [T0]
    before = {e: _waiting_metric(e) for e in ("started", "resumed", "timed_out")}
    service = WaitingService(make_store(), rec.resume, on_timeout=rec.timeout, clock=lambda: now[0])
    p = await service.wait("acme", "w", "mail:thread:abc:replied", wait_for=timedelta(minutes=10))
    now[0] = T0 + timedelta(minutes=11)
    [reminded] = await service.scan_once()
    assert (reminded.state, reminded.reminders, reminded.expires_at) == ("waiting", 1, now[0] + timedelta(hours=24))
    now[0] += timedelta(hours=25)
    [escalated] = await service.scan_once()
    assert (escalated.state, escalated.gated_by) == ("gated", "timeout")
    assert rec.timeouts == [(p.plan_id, "remind"), (p.plan_id, "escalate")]
    confirm = await service.wait("acme", "w", "mail:thread:x:replied", requires_confirmation=True)
    [held] = await service.on_event("acme", "mail:thread:x:replied", "e1")
    assert held.state == "gated" and rec.resumed == []
    assert rec.timeouts[-1] == (confirm.plan_id, "escalate")
    after = {e: _waiting_metric(e) - n for e, n in before.items()}
    assert after == {"started": 2, "resumed": 1, "timed_out": 2}  # genworker_waiting_plans_total
    # a person resumes the held plan; a done plan cannot be cancelled
    resumed = await service.resume_plan("acme", "w", confirm.plan_id, by="dana")
    await service.wait_runs([resumed])
    assert [p.plan_id for p in rec.resumed] == [confirm.plan_id]
    with pytest.raises(WaitingTransitionError, match="is done"):
        await service.cancel("acme", "w", confirm.plan_id)
    cancelled = await service.cancel("acme", "w", (await service.wait("acme", "w", "mail:thread:y:replied")).plan_id)
    assert cancelled.state == "cancelled"
    assert await service.on_event("acme", "mail:thread:y:replied", "e2") == []
    await service.store.aclose()


async def test_the_event_payload_is_stored_on_resumed_and_held_plans(make_store: Callable[[], WaitingStore]) -> None:
    rec = Recorder()
    service = WaitingService(make_store(), rec.resume, on_timeout=rec.timeout, clock=lambda: T0)
    try:
        run = await service.wait("acme", "w", "ci:build:7:done", plan_id="run")
        held = await service.wait("acme", "w", "ci:build:7:done", plan_id="held", requires_confirmation=True)
        payload = {"status": "green", "jobs": [], "meta": {"tags": ["a", "b"], "empty": {}}}
        woken = await service.on_event("acme", "ci:build:7:done", "ev-1", payload)
        await service.wait_runs(woken)
        assert [(p.plan_id, thaw(p.event)) for p in rec.resumed] == [("run", payload)]
        stored = {p.plan_id: p for p in await service.store.list("acme", "w")}
        assert (stored["run"].state, thaw(stored["run"].event)) == ("done", payload)
        assert (stored["held"].state, thaw(stored["held"].event)) == ("gated", payload)  # a person resumes it
        assert rec.timeouts == [("held", "escalate")]
        assert await service.on_event("acme", "ci:build:7:done", "ev-2", {"status": "red"}) == []
        assert {run.plan_id, held.plan_id} == set(stored)
    finally:
        await service.stop()


async def test_recovery_restarts_only_resumes_whose_process_died_and_ends_ended_plans_again(
    make_store: Callable[[], WaitingStore],
) -> None:
    """Process a resumed three plans and crashed; process b is alive and resuming one. Process c
    starts: it restarts the plans of a (same version: the same continuation key), leaves b's alone,
    and hands cancelled / closed plans to on_end again (the crash may have come before it ran)."""
    rec, ended = Recorder(), list[tuple[str, str]]()

    async def on_end(plan: WaitingPlan, reason: str) -> None:
        ended.append((plan.plan_id, reason))

    crashed = WaitingService(make_store(), rec.resume, clock=lambda: T0, owner="rt_a")
    for plan_id in ("mine", "theirs", "legacy", "gone", "closed"):
        await crashed.wait("acme", "w", "ci:build:7:done", plan_id=plan_id)
    [gated] = [p for p in await crashed.store.resume("acme", "ci:build:7:done", "ev-1", T0) if p.plan_id == "mine"]
    store = crashed.store
    running = await store.transition(*gated.key, "gated", "running", resumed_by="rt_a")
    for plan_id, owner in (("theirs", "rt_b"), ("legacy", None)):
        await store.transition("acme", "w", plan_id, "gated", "running", resumed_by=owner)
    await store.transition("acme", "w", "gone", "gated", "cancelled")
    await store.transition("acme", "w", "closed", "gated", "closed")

    service = WaitingService(make_store(), rec.resume, on_end=on_end, clock=lambda: T0, owner="rt_c")
    restarted = await service.recover([("acme", "w"), ("acme", "nobody")], alive=lambda owner: owner == "rt_b")
    await service.wait_runs(restarted)
    assert sorted(p.plan_id for p in restarted) == ["legacy", "mine"]
    assert sorted((p.plan_id, p.version) for p in rec.resumed) == [
        ("legacy", running.version), ("mine", running.version)
    ]  # fmt: skip
    states = {p.plan_id: p.state for p in await service.store.list("acme", "w")}
    assert states == {"mine": "done", "legacy": "done", "theirs": "running", "gone": "cancelled", "closed": "closed"}
    assert sorted(ended) == [
        ("closed", "the wait for ci:build:7:done timed out and was closed"),
        ("gone", "the wait for ci:build:7:done was cancelled"),
    ]
    assert await service.recover([("acme", "w")], alive=lambda owner: owner == "rt_b") == []  # nothing left to do
    await service.stop()
    await crashed.stop()


async def test_recovery_starts_plans_a_dead_process_gated_once_with_their_payload(
    make_store: Callable[[], WaitingStore],
) -> None:
    """Process a gated four plans (the store step of an event, of a manual resume) and died before
    moving them to RUNNING. Two processes start at once: each unattended plan runs once, with the
    event's payload; a plan held for a person's confirmation, one held after its timeout and one a
    live process gated stay GATED."""
    rec = Recorder()
    store = make_store()
    payload = {"status": "green", "jobs": []}
    for plan_id, fields in (("by_event", {}), ("held", {"requires_confirmation": True})):
        await store.add(plan(plan_id, "ci:build:7:done", **fields))
    await store.add(plan("live", "ci:build:8:done"))
    await store.add(plan("by_hand", "ci:build:9:done"))
    await store.add(plan("timed_out", expires=timedelta(minutes=1), on_timeout="escalate"))
    await store.resume("acme", "ci:build:7:done", "ev-1", T0, event=payload, gater="rt_a")
    await store.resume("acme", "ci:build:8:done", "ev-2", T0, event=payload, gater="rt_b")
    await store.transition("acme", "w", "by_hand", "waiting", "gated", now=T0, gated_by="manual", gater="rt_a")
    await store.expire_due(T0 + timedelta(hours=2))

    services = [WaitingService(make_store(), rec.resume, clock=lambda: T0, owner=f"rt_{n}") for n in "cd"]
    # rt_b and the two recovering processes are alive: one that lists after the other claimed a plan
    # sees it RUNNING under a live owner, and leaves it
    alive = lambda owner: owner in ("rt_b", "rt_c", "rt_d")  # noqa: E731
    started = await asyncio.gather(*(s.recover([("acme", "w")], alive) for s in services))
    for service in services:
        await service.wait_runs(started[0] + started[1])
    assert sorted(p.plan_id for batch in started for p in batch) == ["by_event", "by_hand"]
    assert sorted((p.plan_id, p.gated_by, thaw(p.event)) for p in rec.resumed) == [
        ("by_event", "event", payload), ("by_hand", "manual", None)
    ]  # fmt: skip
    states = {p.plan_id: p.state for p in await store.list("acme", "w")}
    assert states == {"by_event": "done", "by_hand": "done", "held": "gated", "live": "gated", "timed_out": "gated"}
    assert await services[0].recover([("acme", "w")], alive) == []
    for service in services:
        await service.stop()


async def test_the_lease_sweep_starts_plans_gated_by_a_dead_process_not_its_own(
    make_store: Callable[[], WaitingStore],
) -> None:
    rec = Recorder()
    store = make_store()
    await store.add(plan("orphan", "ci:build:1:done"))
    await store.add(plan("mine", "ci:build:2:done"))
    await store.resume("acme", "ci:build:1:done", "ev-1", T0, event={"n": 1}, gater="rt_dead")
    await store.resume("acme", "ci:build:2:done", "ev-2", T0, event={"n": 2}, gater="rt_me")  # mid on_event here
    service = WaitingService(make_store(), rec.resume, clock=lambda: T0, owner="rt_me")
    started = await service.recover([("acme", "w")], lambda owner: owner == "rt_me", at_start=False)
    await service.wait_runs(started)
    assert [(p.plan_id, thaw(p.event)) for p in rec.resumed] == [("orphan", {"n": 1})]
    assert {p.plan_id: p.state for p in await store.list("acme", "w")} == {"orphan": "done", "mine": "gated"}
    await service.stop()


async def test_a_resumed_plan_names_the_instance_resuming_it(make_store: Callable[[], WaitingStore]) -> None:
    rec = Recorder()
    service = WaitingService(make_store(), rec.resume, clock=lambda: T0, owner="rt_me")
    await service.wait("acme", "w", "ci:build:8:done", plan_id="by_event")
    await service.wait("acme", "w", "ci:build:9:done", plan_id="by_hand")
    woken = await service.on_event("acme", "ci:build:8:done", "ev-1")
    woken.append(await service.resume_plan("acme", "w", "by_hand", by="dana"))
    assert [(p.plan_id, p.resumed_by) for p in woken] == [("by_event", "rt_me"), ("by_hand", "rt_me")]
    await service.wait_runs(woken)
    assert [p.resumed_by for p in rec.resumed] == ["rt_me", "rt_me"]
    await service.stop()


async def test_the_file_index_heals_after_a_crash_between_marker_and_plan(tmp_path: Path) -> None:
    store = FileWaitingStore(tmp_path)
    await store.add(plan("kept"))
    await store.add(plan("lost"))
    (tmp_path / "tenants/acme/workers/w/runtime/waiting/lost.json").unlink()  # the crash: markers, no plan
    assert [p.plan_id for p in await store.resume("acme", "github:issue:42:updated", "e", T0)] == ["kept"]
    index = tmp_path / "tenants/acme/runtime/waiting_index"
    assert list((index / "keys").rglob("*~*")) == []  # the orphan's key marker went with the event
    assert await store.expire_due(T0 + timedelta(days=2)) == []
    assert list(index.rglob("*~*")) == []  # and its expiry marker with the scan


async def test_a_sensed_fact_with_a_match_key_wakes_its_plans(tmp_path: Path) -> None:
    """A webhook body `{"match_key": ...}` lands in the inbox; its item_written event wakes the plan."""
    from genworker.autonomy.inbox import FileInboxStore, new_item

    bus = InProcessEventBus()
    inbox = FileInboxStore(tmp_path, bus=bus)
    rec = Recorder()
    service = WaitingService(FileWaitingStore(tmp_path), rec.resume, bus=bus, inbox=inbox, clock=lambda: T0)
    await service.start()
    try:
        parked = await service.wait("acme", "w", "github:issue:42:updated")
        body = {"match_key": "github:issue:42:updated", "action": "edited"}
        fact = new_item("acme", "w", "webhook", "hooks", "webhook.fact", body)
        assert await inbox.write(fact)
        assert await inbox.write(new_item("acme", "w", "webhook", "hooks", "webhook.fact", {"no": "key"}))
        await asyncio.wait_for(rec.seen.wait(), 10)
        await bus.close()
        await service.wait_runs([parked])
        [resumed] = rec.resumed
        assert (resumed.plan_id, resumed.event_id) == (parked.plan_id, fact.item_id)  # the fact that woke it
        assert resumed.event == body  # the item's payload, not the inbox event's
    finally:
        await service.stop()


def _waiting_metric(event: str) -> float:
    return REGISTRY.get_sample_value("genworker_waiting_plans_total", {"event": event}) or 0.0


async def test_ended_plans_past_retention_are_forgotten_and_nothing_else(
    make_store: Callable[[], WaitingStore],
) -> None:
    store = make_store()
    for plan_id in ("done_old", "cancelled_old", "closed_new", "running_old", "waiting_old"):
        await store.add(plan(plan_id))
    day = timedelta(days=1)
    await store.transition("acme", "w", "done_old", "waiting", "gated", now=T0)
    await store.transition("acme", "w", "done_old", "gated", "done", now=T0 + day)
    await store.transition("acme", "w", "cancelled_old", "waiting", "cancelled", now=T0 + day)
    await store.transition("acme", "w", "closed_new", "waiting", "closed", now=T0 + 40 * day)
    await store.transition("acme", "w", "running_old", "waiting", "gated", now=T0)
    await store.transition("acme", "w", "running_old", "gated", "running", now=T0)
    await store.add(plan("other_worker_old", worker="v"))
    await store.transition("acme", "v", "other_worker_old", "waiting", "cancelled", now=T0)

    assert await store.forget_ended("acme", "w", T0 + 31 * day) == 2
    assert sorted(p.plan_id for p in await store.list("acme", "w")) == ["closed_new", "running_old", "waiting_old"]
    assert [p.plan_id for p in await store.list("acme", "v")] == ["other_worker_old"]  # another worker's
    assert await store.forget_ended("acme", "w", T0 + 31 * day) == 0
    # a forgotten plan's key no longer wakes anything, the others still do
    assert sorted(p.plan_id for p in await store.waiters("acme", "github:issue:42:updated")) == ["waiting_old"]


async def test_recovery_deletes_ended_plans_older_than_the_retention(make_store: Callable[[], WaitingStore]) -> None:
    store = make_store()
    await store.add(plan("long_done"))
    await store.transition("acme", "w", "long_done", "waiting", "closed", now=T0)
    await store.add(plan("just_closed"))
    await store.transition("acme", "w", "just_closed", "waiting", "closed", now=T0 + timedelta(days=29))
    later = T0 + timedelta(days=31)
    service = WaitingService(make_store(), Recorder().resume, clock=lambda: later, retention_s=30 * 86_400)
    assert await service.recover([("acme", "w")], alive=lambda owner: False) == []
    assert [p.plan_id for p in await store.list("acme", "w")] == ["just_closed"]
    await service.stop()


async def test_the_lease_sweep_restarts_resumes_of_a_dead_process_only(make_store: Callable[[], WaitingStore]) -> None:
    """While this process runs, another one dies mid-resume: the sweep restarts that plan once, leaves
    a live process's resume alone, and does not end cancelled plans again (start-up does that)."""
    rec, ended = Recorder(), list[str]()

    async def on_end(plan: WaitingPlan, reason: str) -> None:
        ended.append(plan.plan_id)

    store = make_store()
    for plan_id, state, owner in (("orphan", "running", "rt_dead"), ("busy", "running", "rt_live"),
                                  ("given_up", "cancelled", None)):  # fmt: skip
        await store.add(plan(plan_id))
        await store.transition("acme", "w", plan_id, "waiting", "gated", now=T0)
        await store.transition("acme", "w", plan_id, "gated", state, now=T0, resumed_by=owner)
    service = WaitingService(make_store(), rec.resume, on_end=on_end, clock=lambda: T0, owner="rt_me")
    alive = lambda owner: owner in ("rt_live", "rt_me")  # noqa: E731
    restarted = await service.recover([("acme", "w")], alive, at_start=False)
    await service.wait_runs(restarted)
    assert [p.plan_id for p in restarted] == ["orphan"] and [p.plan_id for p in rec.resumed] == ["orphan"]
    assert ended == []
    states = {p.plan_id: p.state for p in await store.list("acme", "w")}
    assert states == {"orphan": "done", "busy": "running", "given_up": "cancelled"}
    assert await service.recover([("acme", "w")], alive, at_start=False) == []  # done: not again
    await service.stop()
