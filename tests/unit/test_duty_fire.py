"""Duty firing without a model: slots (time zones, DST), misfire policies, exactly-once keys through
the real task lifecycle's claims, condition edges, event matching and the execution log.

The route is the lifecycle's `persist_initial` (what the router calls before anything runs), so a
duplicate key returns the first run exactly as it does in production; the clock is a variable."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from genworker.autonomy.duties import (
    DutyScheduler,
    DutyState,
    DutyStore,
    StaticMetrics,
    TriggerState,
    aps_trigger,
    due_slots,
    duty_version,
    evaluate_rule,
    event_matches,
    select_slots,
)
from genworker.autonomy.duties.slots import EPOCH
from genworker.bus import InProcessEventBus
from genworker.bus.models import new_event
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.router import RouteRequest
from genworker.worker.task import RunRecord, TaskManifest, TaskProvenance
from genworker.workspace.models.duty import EventTrigger, ScheduleTrigger
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
DUTY = "tenants/acme/workers/alice/duties/{name}.md"


def duty_md(duty_id: str, triggers: str, action: str = "Do the thing.", extra: str = "") -> str:
    return f"---\nduty_id: {duty_id}\ntitle: {duty_id}\ntriggers:\n{triggers}{extra}---\n{action}\n"


HOURLY = "  - {id: s, type: schedule, interval: 1h, misfire_policy: %s, catch_up_max_runs: 3, catch_up_window: 4h}\n"


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class LifecycleRoute:
    """Persists the task the router would, and reports whether this request created the run."""

    def __init__(self, root: Path) -> None:
        self.lifecycle = TaskLifecycle(root)
        self.requests: list[RouteRequest] = []

    async def __call__(self, req: RouteRequest) -> tuple[RunRecord, bool]:
        self.requests.append(req)
        run_id = f"run_{uuid.uuid4().hex}"
        provenance = TaskProvenance(
            source_type="duty",
            duty_id=req.duty_id,
            trigger_id=req.trigger_id,
            scheduled_for=req.scheduled_for,
            idempotency_key=req.idempotency_key,
        )
        manifest = TaskManifest(
            f"task_{uuid.uuid4().hex}", run_id, req.tenant_id, req.worker_id, req.text, T0, provenance=provenance
        )
        run = await self.lifecycle.persist_initial(manifest)
        return run, run.run_id == run_id


@pytest.fixture
def load(small_workspace: Callable[..., Path]) -> Callable[[Mapping[str, str]], tuple[Path, Worker]]:
    def build(duties: Mapping[str, str]) -> tuple[Path, Worker]:
        root = small_workspace({"acme": ["alice"]}, {DUTY.format(name=k): v for k, v in duties.items()})
        return root, reload(root)

    return build


def reload(root: Path) -> Worker:
    registry = WorkspaceRegistry(root)
    registry.load_all()
    worker = registry.worker("acme", "alice")
    assert worker is not None, registry.issues()
    return worker


def scheduler(root: Path, worker: Worker, clock: Clock, route: LifecycleRoute, **kw: object) -> DutyScheduler:
    s = DutyScheduler(DutyStore(root), route, clock=clock, **kw)  # type: ignore[arg-type]
    s.sync([worker])
    return s


def runs(root: Path) -> list[str]:
    folder = root / "tenants/acme/workers/alice/runs"
    return sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []


# -- slots -----------------------------------------------------------------------------


def test_cron_slots_follow_the_time_zone_across_dst() -> None:
    daily = ScheduleTrigger(id="s", type="schedule", cron="30 2 * * *", timezone="Europe/Berlin")
    spring = due_slots(aps_trigger(daily), datetime(2025, 3, 28, tzinfo=UTC), datetime(2025, 4, 1, tzinfo=UTC))
    # 02:30 does not exist on 30 March: it fires at 03:30 CEST; afterwards 02:30 CEST is 00:30 UTC
    assert [s.strftime("%d %H:%M") for s in spring] == ["28 01:30", "29 01:30", "30 01:30", "31 00:30"]
    autumn = due_slots(aps_trigger(daily), datetime(2025, 10, 24, tzinfo=UTC), datetime(2025, 10, 28, tzinfo=UTC))
    # 02:30 happens twice on 26 October: one slot, the first
    assert [s.strftime("%d %H:%M") for s in autumn] == ["24 00:30", "25 00:30", "26 00:30", "27 01:30"]
    weekdays = ScheduleTrigger(id="s", type="schedule", cron="0 9 * * mon-fri", timezone="America/New_York")
    ny = due_slots(aps_trigger(weekdays), datetime(2025, 3, 6, tzinfo=UTC), datetime(2025, 3, 12, tzinfo=UTC))
    assert [s.strftime("%a %H:%M") for s in ny] == ["Thu 14:00", "Fri 14:00", "Mon 13:00", "Tue 13:00"]
    assert all(s.tzinfo is UTC for s in ny)


def test_interval_slots_are_anchored_so_a_restart_does_not_move_them() -> None:
    every = aps_trigger(ScheduleTrigger(id="s", type="schedule", interval=3600))
    first = due_slots(every, T0 + timedelta(minutes=7), T0 + timedelta(hours=3))
    again = due_slots(every, T0 + timedelta(minutes=31), T0 + timedelta(hours=3))
    assert first == again == [T0 + timedelta(hours=h) for h in (1, 2, 3)]
    assert due_slots(every, T0, T0 + timedelta(hours=10), keep=2) == [T0 + timedelta(hours=9), T0 + timedelta(hours=10)]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("skip", []), ("run_once", [6]), ("catch_up_bounded", [4, 5, 6])],
)
def test_select_slots_bounds_every_policy(policy: str, expected: list[int]) -> None:
    trigger = ScheduleTrigger(
        id="s", type="schedule", interval=3600, misfire_policy=policy, catch_up_max_runs=3, catch_up_window=4 * 3600
    )
    due = [T0 + timedelta(hours=h) for h in range(1, 7)]
    now = T0 + timedelta(hours=6, minutes=5)
    assert select_slots(trigger, due, now, timedelta(seconds=60)) == [T0 + timedelta(hours=h) for h in expected]
    on_time = select_slots(trigger, due, T0 + timedelta(hours=6, seconds=1), timedelta(seconds=60))
    assert on_time[-1:] == [T0 + timedelta(hours=6)]  # an on-time slot always fires
    narrow = trigger.model_copy(update={"catch_up_window": 90 * 60.0})
    if policy == "catch_up_bounded":
        assert select_slots(narrow, due, now, timedelta(seconds=60)) == [T0 + timedelta(hours=h) for h in (5, 6)]


@pytest.mark.parametrize("policy", ["skip", "run_once", "catch_up_bounded"])
def test_a_slot_due_since_the_scheduler_runs_the_trigger_is_never_missed(policy: str) -> None:
    trigger = ScheduleTrigger(
        id="s", type="schedule", interval=3600, misfire_policy=policy, catch_up_max_runs=3, catch_up_window=600
    )
    due = [T0 + timedelta(hours=h) for h in range(1, 4)]
    late = T0 + timedelta(hours=3, minutes=20)  # the tick for 03:00 comes 20 minutes late (a busy loop, a suspend)
    grace = timedelta(seconds=60)
    assert select_slots(trigger, due, late, grace, running_since=T0 + timedelta(hours=2, minutes=30)) == due[-1:]
    # not running when it came due (down since before 03:00): a missed slot, by the policy
    missed = select_slots(trigger, due, late, grace, running_since=T0 + timedelta(hours=3, minutes=19))
    assert missed == {"skip": [], "run_once": due[-1:], "catch_up_bounded": []}[policy]


def test_rules() -> None:
    assert evaluate_rule("> 10", 11) and not evaluate_rule("> 10", 10)
    assert evaluate_rule("== true", True) and evaluate_rule("false", False) and not evaluate_rule("<= 1", None)
    with pytest.raises(ValueError, match="rule"):
        evaluate_rule("> lots", 1)


# -- exactly once ------------------------------------------------------------------------


async def test_one_slot_fired_twice_and_by_two_schedulers_runs_once(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % "run_once")})
    clock, route = Clock(), LifecycleRoute(root)
    first = scheduler(root, worker, clock, route)
    second = scheduler(root, worker, clock, route)  # another runtime sharing the workspace
    assert await first.tick("acme", "alice", "d", "s") == []  # arms: nothing before the first start
    clock.now = T0 + timedelta(hours=1, seconds=2)
    a, b = await asyncio.gather(first.tick("acme", "alice", "d", "s"), second.tick("acme", "alice", "d", "s"))
    again = await first.tick("acme", "alice", "d", "s")
    fired = [*a, *b]
    assert len(fired) == 2 and again == []
    assert (
        fired[0].key
        == fired[1].key
        == f"d:s:{(T0 + timedelta(hours=1)).isoformat()}:{duty_version(worker.duties['d'])}"
    )
    assert sorted(f.created for f in fired) == [False, True] and fired[0].run.run_id == fired[1].run.run_id
    assert len(runs(root)) == 1
    assert route.requests[0].scheduled_for == T0 + timedelta(hours=1)
    assert len(first.store.executions("acme", "alice", "d")) == 1


async def test_a_restart_does_not_run_a_slot_again(load: Callable[[Mapping[str, str]], tuple[Path, Worker]]) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % "catch_up_bounded")})
    clock, route = Clock(), LifecycleRoute(root)
    await scheduler(root, worker, clock, route).tick("acme", "alice", "d", "s")
    clock.now = T0 + timedelta(hours=1)
    assert len(await scheduler(root, worker, clock, route).tick("acme", "alice", "d", "s")) == 1
    # the process died before it recorded the slot as handled: the next one only finds the claim
    store = DutyStore(root)
    stale = DutyState(triggers={"s": TriggerState(last_slot=T0)})
    store.state_path("acme", "alice", "d").write_text(stale.model_dump_json(), encoding="utf-8")
    clock.now = T0 + timedelta(hours=1, seconds=30)
    restarted = await scheduler(root, reload(root), clock, route).tick("acme", "alice", "d", "s")
    assert [f.created for f in restarted] == [False]
    assert len(runs(root)) == 1


@pytest.mark.parametrize(("policy", "expected"), [("skip", []), ("run_once", [6]), ("catch_up_bounded", [4, 5, 6])])
async def test_misfire_after_a_six_hour_outage(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]], policy: str, expected: list[int]
) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % policy)})
    clock, route = Clock(), LifecycleRoute(root)
    await scheduler(root, worker, clock, route).tick("acme", "alice", "d", "s")
    clock.now = T0 + timedelta(hours=6, minutes=10)  # down from T0 until now
    fired = await scheduler(root, worker, clock, route).tick("acme", "alice", "d", "s")
    assert [f.scheduled_for for f in fired] == [T0 + timedelta(hours=h) for h in expected]
    assert len(runs(root)) == len(expected)
    clock.now = T0 + timedelta(hours=6, minutes=20)
    assert await scheduler(root, worker, clock, route).tick("acme", "alice", "d", "s") == []  # all handled
    clock.now = T0 + timedelta(hours=7)
    assert len(await scheduler(root, worker, clock, route).tick("acme", "alice", "d", "s")) == 1  # on time


async def test_reloading_an_unchanged_duty_keeps_the_key(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]], tmp_path: Path
) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % "run_once")})
    reloaded = reload(root)
    assert reloaded is not worker
    assert duty_version(reloaded.duties["d"]) == duty_version(worker.duties["d"])
    clock, route = Clock(), LifecycleRoute(root)
    s = scheduler(root, worker, clock, route)
    await s.tick("acme", "alice", "d", "s")
    clock.now = T0 + timedelta(hours=1)
    [before] = await s.tick("acme", "alice", "d", "s")
    s.sync([reloaded])
    # a second runtime that only knows the reloaded worker reaches the same slot: same key, no run
    clock2 = Clock()
    other = DutyScheduler(DutyStore(tmp_path), route, clock=clock2)
    other.sync([reloaded])
    await other.tick("acme", "alice", "d", "s")
    clock2.now = T0 + timedelta(hours=1)
    [after] = await other.tick("acme", "alice", "d", "s")
    assert after.key == before.key and not after.created and len(runs(root)) == 1
    path = root / DUTY.format(name="d")
    path.write_text(duty_md("d", HOURLY % "run_once", action="Do another thing."), encoding="utf-8")
    assert duty_version(reload(root).duties["d"]) != duty_version(worker.duties["d"])


# -- conditions and events ---------------------------------------------------------------


async def test_a_condition_fires_on_the_transition_into_true_only(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, worker = load({"c": duty_md("c", "  - {id: q, type: condition, metric: queue, rule: '> 10'}\n")})
    clock, route, metrics = Clock(), LifecycleRoute(root), StaticMetrics()
    s = scheduler(root, worker, clock, route, metrics=metrics)
    key = ("acme", "alice", "queue")
    metrics.values[key] = 3
    assert await s.check("acme", "alice", "c", "q") is None
    metrics.values[key] = 12
    assert await s.check("acme", "alice", "c", "q") is not None
    clock.now += timedelta(minutes=5)
    metrics.values[key] = 15
    assert await s.check("acme", "alice", "c", "q") is None  # still true
    restarted = scheduler(root, reload(root), clock, route, metrics=metrics)
    assert await restarted.check("acme", "alice", "c", "q") is None  # still true across a restart
    metrics.values[key] = None  # unknown counts as false
    assert await restarted.check("acme", "alice", "c", "q") is None
    clock.now += timedelta(minutes=5)
    metrics.values[key] = 11
    fired = await restarted.check("acme", "alice", "c", "q")
    assert fired is not None and fired.created and len(runs(root)) == 2


async def test_a_transition_recorded_before_a_crash_fires_once_after_it(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, _ = load({"c": duty_md("c", "  - {id: q, type: condition, metric: queue, rule: '> 10'}\n")})
    clock, route, metrics = Clock(), LifecycleRoute(root), StaticMetrics()
    metrics.values[("acme", "alice", "queue")] = 12
    store = DutyStore(root)
    # the process recorded the transition, then died before firing
    pending = store.transition("acme", "alice", "c", "q", True, T0)
    assert pending == T0 and runs(root) == []
    first, second = (
        scheduler(root, reload(root), clock, route, metrics=metrics),
        scheduler(root, reload(root), clock, route, metrics=metrics),
    )
    clock.now += timedelta(minutes=1)
    a, b = await asyncio.gather(first.check("acme", "alice", "c", "q"), second.check("acme", "alice", "c", "q"))
    fired = [o for o in (a, b) if o is not None]
    assert [o.created for o in fired].count(True) == 1 and {o.scheduled_for for o in fired} == {T0}
    assert len(runs(root)) == 1
    assert await first.check("acme", "alice", "c", "q") is None  # settled: still true, nothing new
    assert store.read_state("acme", "alice", "c").triggers["q"].pending_fire is None
    assert len(runs(root)) == 1


def test_event_matching() -> None:
    trigger = EventTrigger(id="e", type="event", source="sensor.*", event_type="email.*", filter={"folder": "INBOX"})

    class W:
        tenant_id, worker_id = "acme", "alice"

    worker: Worker = W()  # type: ignore[assignment]

    def ev(tenant: str = "acme", source: str = "sensor.mail", topic: str = "email.received", **payload: object):  # type: ignore[no-untyped-def]
        return new_event(
            topic, source=source, tenant_id=tenant, worker_id="alice", payload={"folder": "INBOX", **payload}
        )

    assert event_matches(trigger, worker, ev())
    assert not event_matches(trigger, worker, ev(tenant="other"))
    assert not event_matches(trigger, worker, ev(source="inbox"))
    assert not event_matches(trigger, worker, ev(topic="mail.received"))
    assert not event_matches(trigger, worker, ev(folder="Spam"))
    sensor_item = new_event(
        "inbox.item_written",
        source="inbox",
        tenant_id="acme",
        worker_id="alice",
        payload={"source_id": "sensor.mail", "event_type": "email.received", "folder": "INBOX"},
    )
    assert event_matches(trigger, worker, sensor_item)
    assert not event_matches(
        trigger,
        worker,
        new_event("inbox.item_consumed", source="inbox", tenant_id="acme", payload=dict(sensor_item.payload)),
    )


async def test_an_event_fires_its_duty_once_through_the_bus(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, worker = load({"e": duty_md("e", "  - {id: hook, type: event, source: webhook, event_type: deploy.done}\n")})
    bus = InProcessEventBus()
    inner = LifecycleRoute(root)
    routed = asyncio.Event()

    async def route(req: RouteRequest) -> tuple[RunRecord, bool]:
        result = await inner(req)
        routed.set()
        return result

    s = DutyScheduler(DutyStore(root), route, bus=bus, clock=Clock())
    await s.start([worker])
    try:
        await bus.publish(new_event("deploy.done", source="other", tenant_id="acme"))
        await bus.publish(new_event("deploy.done", source="webhook", tenant_id="zeta"))
        event = new_event("deploy.done", source="webhook", tenant_id="acme")
        await bus.publish(event)
        async with asyncio.timeout(5):
            await routed.wait()
        again = await s.on_event(event)  # the same event delivered twice
    finally:
        await s.stop()
        await bus.close()
    assert [f.created for f in again] == [False]
    assert len(runs(root)) == 1 and len(inner.requests) == 2
    assert inner.requests[0].scheduled_for == event.occurred_at
    assert inner.requests[0].idempotency_key == again[0].key and f"event-{event.event_id}" in (again[0].key or "")


# -- execution records -------------------------------------------------------------------


async def test_execution_records_are_pruned_by_retention(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % "run_once", extra="execution_log_retention: 90m\n")})
    clock, route = Clock(), LifecycleRoute(root)
    s = scheduler(root, worker, clock, route)
    await s.tick("acme", "alice", "d", "s")
    for hour in (1, 2, 3):
        clock.now = T0 + timedelta(hours=hour)
        await s.tick("acme", "alice", "d", "s")
    records = s.store.executions("acme", "alice", "d")
    assert [r.scheduled_for for r in records] == [T0 + timedelta(hours=2), T0 + timedelta(hours=3)]
    assert {r.trigger_type for r in records} == {"schedule"} and all(r.key and r.run_id for r in records)
    assert len(runs(root)) == 3


async def test_apscheduler_fires_an_interval_job(load: Callable[[Mapping[str, str]], tuple[Path, Worker]]) -> None:
    root, worker = load({"d": duty_md("d", "  - {id: s, type: schedule, interval: 1s}\n")})
    fired = asyncio.Event()
    inner = LifecycleRoute(root)

    async def route(req: RouteRequest) -> tuple[RunRecord, bool]:
        result = await inner(req)
        fired.set()
        return result

    s = DutyScheduler(DutyStore(root), route)
    await s.start([worker])
    try:
        assert set(s.jobs()) == {"duty:acme/alice/d/s"}
        async with asyncio.timeout(10):
            await fired.wait()
    finally:
        await s.stop()
    assert inner.requests[0].idempotency_key is not None
    assert inner.requests[0].scheduled_for is not None and inner.requests[0].scheduled_for.microsecond == 0


class SignallingRoute(LifecycleRoute):
    """LifecycleRoute that sets `routed` once a request has been routed."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.routed = asyncio.Event()

    async def __call__(self, req: RouteRequest) -> tuple[RunRecord, bool]:
        result = await super().__call__(req)
        self.routed.set()
        return result


def since_epoch(at: datetime) -> timedelta:
    return at - EPOCH


@pytest.mark.parametrize(
    ("trigger", "step"),
    [
        ("interval: 5m", timedelta(minutes=5)),
        ("interval: 30m", timedelta(minutes=30)),
        ("interval: 7s", timedelta(seconds=7)),
        ("cron: '*/5 * * * *'", timedelta(minutes=5)),
    ],
)
async def test_a_running_schedule_ticks_on_its_slots(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]], trigger: str, step: timedelta
) -> None:
    """After the start-up tick, APScheduler's own arithmetic on the trigger the job runs times every
    later tick on a slot: epoch-anchored intervals, wall-clock cron."""
    root, worker = load({"d": duty_md("d", f"  - {{id: s, type: schedule, {trigger}}}\n")})
    store = DutyStore(root)
    started = datetime.now(UTC)
    earlier = DutyState(triggers={"s": TriggerState(last_slot=started - 4 * step)})
    store.state_path("acme", "alice", "d").parent.mkdir(parents=True)
    store.state_path("acme", "alice", "d").write_text(earlier.model_dump_json(), encoding="utf-8")
    route = SignallingRoute(root)
    s = DutyScheduler(store, route)
    await s.start([worker])
    try:
        async with asyncio.timeout(30):
            await route.routed.wait()  # the start-up tick caught up the latest slot: APScheduler has moved on
        job = s.jobs()["duty:acme/alice/d/s"]
        ticks = [job.next_run_time]
        for _ in range(4):  # each later run: as APScheduler computes it from the run before
            ticks.append(job.trigger.get_next_fire_time(ticks[-1], ticks[-1]))
        after = datetime.now(UTC)
    finally:
        await s.stop()
    caught_up = route.requests[0]
    assert caught_up.scheduled_for is not None and since_epoch(caught_up.scheduled_for) % step == timedelta(0)
    assert [since_epoch(t) % step for t in ticks] == [timedelta(0)] * 5
    assert [b - a for a, b in pairwise(ticks)] == [step] * 4
    assert ticks[0] > caught_up.scheduled_for and ticks[0] - step <= after  # the next slot, none skipped


@pytest.mark.parametrize("policy", ["skip", "run_once", "catch_up_bounded"])
@pytest.mark.parametrize("trigger", ["interval: 2s", "cron: '*/2 * * * * *'"])
async def test_a_slot_that_comes_due_while_running_fires_under_every_policy(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]], trigger: str, policy: str
) -> None:
    """Its tick always comes after the slot; with no grace at all the slot still fires, as the slot due now."""
    root, worker = load({"d": duty_md("d", f"  - {{id: s, type: schedule, {trigger}, misfire_policy: {policy}}}\n")})
    route = SignallingRoute(root)
    started = datetime.now(UTC)
    s = DutyScheduler(DutyStore(root), route, grace=timedelta(0))
    await s.start([worker])
    try:
        async with asyncio.timeout(60):
            await route.routed.wait()
    finally:
        await s.stop()
    fired = route.requests[0]  # the first tick only armed the trigger: nothing from before the start
    assert fired.scheduled_for is not None and fired.scheduled_for > started
    assert since_epoch(fired.scheduled_for) % timedelta(seconds=2) == timedelta(0)
    assert s.store.executions("acme", "alice", "d")[0].scheduled_for == fired.scheduled_for


def test_numeric_cron_weekdays_follow_standard_cron() -> None:
    import datetime as dt

    from genworker.autonomy.duties.slots import aps_trigger
    from genworker.workspace.models.cron import cron_day_of_week
    from genworker.workspace.models.duty import ScheduleTrigger

    assert cron_day_of_week("1-5") == "mon,tue,wed,thu,fri"
    assert cron_day_of_week("0,6") == "sun,sat" and cron_day_of_week("7") == "sun"
    assert cron_day_of_week("*/2") == "sun,tue,thu,sat" and cron_day_of_week("mon-fri") == "mon,tue,wed,thu,fri"
    trigger = ScheduleTrigger(id="t", type="schedule", cron="0 9 * * 1", timezone="UTC")
    wednesday = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)
    assert aps_trigger(trigger).get_next_fire_time(None, wednesday) == dt.datetime(2026, 12, 7, 9, tzinfo=dt.UTC)


# -- SLA retries across restarts ---------------------------------------------------------------

RETRIED = "contract: {version: '1', sla: {retries: 2, retry_backoff: 30m}}\n"


class FailingRoute(LifecycleRoute):
    """LifecycleRoute whose runs fail (started, then `failed`) while `failing`; `routed` is set on each call."""

    def __init__(self, root: Path, failing: bool = True) -> None:
        super().__init__(root)
        self.failing = failing
        self.routed = asyncio.Event()

    async def __call__(self, req: RouteRequest) -> tuple[RunRecord, bool]:
        run, created = await super().__call__(req)
        if created and self.failing:
            await self.lifecycle.start(run.ref)
            run = await self.lifecycle.fail(run.ref, "boom", "the model was down")
        self.routed.set()
        return run, created

    def keys(self) -> list[str]:
        return [str(r.idempotency_key) for r in self.requests]


async def failed_then_stopped(root: Path, worker: Worker, clock: Clock) -> str:
    """A slot's run fails; its scheduler stops while waiting out the retry's backoff. Its key."""
    route = FailingRoute(root)
    first = scheduler(root, worker, clock, route)
    await first.tick("acme", "alice", "d", "s")  # arms
    clock.now = T0 + timedelta(hours=1, seconds=2)
    ticking = asyncio.create_task(first.tick("acme", "alice", "d", "s"))
    await asyncio.wait_for(route.routed.wait(), 30)
    await first.stop()  # the process goes away during the backoff
    [fired] = await asyncio.wait_for(ticking, 30)
    assert fired.run.state == "failed" and route.keys() == [fired.key]
    assert fired.key is not None
    return fired.key


def owed(root: Path) -> dict[str, tuple[int, datetime | None]]:
    state = DutyStore(root).read_state("acme", "alice", "d").triggers["s"]
    return {key: (p.attempt, p.due_at) for key, p in state.retries.items()}


async def test_a_retry_waiting_out_its_backoff_runs_once_after_a_restart(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % "skip", extra=RETRIED)})
    clock = Clock()
    key = await failed_then_stopped(root, worker, clock)
    due = T0 + timedelta(hours=1, seconds=2, minutes=30)
    assert owed(root) == {key: (1, due)}

    # restarted before the retry is due: it waits for its time, it does not run at once
    clock.now = due - timedelta(minutes=10)
    early_route = FailingRoute(root, failing=False)
    early = scheduler(root, reload(root), clock, early_route)
    await early.start([reload(root)])
    await early.stop()
    assert early_route.requests == [] and owed(root) == {key: (1, due)}

    # restarted after it was due: it runs at once, once, and nothing is owed any more
    clock.now = due + timedelta(hours=2)
    route = FailingRoute(root, failing=False)
    again = scheduler(root, reload(root), clock, route)
    await again.start([reload(root)])
    await asyncio.wait_for(route.routed.wait(), 30)
    await again.stop(grace_s=30)
    assert route.keys() == [f"{key}:retry-1"] and owed(root) == {}
    assert len(runs(root)) == 2
    [record] = [r for r in DutyStore(root).executions("acme", "alice", "d") if r.key == f"{key}:retry-1"]
    assert record.state == "queued" and record.scheduled_for == T0 + timedelta(hours=1)

    third_route = FailingRoute(root)
    third = scheduler(root, reload(root), clock, third_route)
    await third.start([reload(root)])
    await third.stop()
    assert third_route.requests == [] and len(runs(root)) == 2


async def test_an_owed_retry_resumed_by_two_runtimes_or_after_it_ran_runs_once(
    load: Callable[[Mapping[str, str]], tuple[Path, Worker]],
) -> None:
    root, worker = load({"d": duty_md("d", HOURLY % "skip", extra=RETRIED)})
    clock = Clock()
    key = await failed_then_stopped(root, worker, clock)
    clock.now = T0 + timedelta(hours=5, minutes=10)  # the 14:00 slot is missed (skip): only the retry runs
    routes = [FailingRoute(root), FailingRoute(root)]  # the retries fail too: the second retry is owed then
    both = [scheduler(root, reload(root), clock, r) for r in routes]
    await asyncio.gather(*(s.start([reload(root)]) for s in both))
    await asyncio.gather(*(asyncio.wait_for(r.routed.wait(), 30) for r in routes))
    await asyncio.gather(*(s.stop(grace_s=30) for s in both))
    assert [r.keys() for r in routes] == [[f"{key}:retry-1"]] * 2
    assert len(runs(root)) == 2  # the first run and one retry, whoever made it
    [(attempt, due)] = owed(root).values()
    assert attempt == 2 and due == T0 + timedelta(hours=5, minutes=40)

    # the process died after the second retry ran, before it cleared what it owed: its key holds the run
    clock.now = T0 + timedelta(hours=6, minutes=10)
    ran = FailingRoute(root, failing=False)
    await scheduler(root, reload(root), clock, ran).tick("acme", "alice", "d", "s")  # arms a fresh scheduler
    await ran(RouteRequest("acme", "alice", "Do the thing.", "duty", idempotency_key=f"{key}:retry-2",
                           duty_id="d", trigger_id="s", scheduled_for=T0 + timedelta(hours=1)))  # fmt: skip
    resumed = FailingRoute(root)
    s = scheduler(root, reload(root), clock, resumed)
    await s.start([reload(root)])
    await asyncio.wait_for(resumed.routed.wait(), 30)
    await s.stop(grace_s=30)
    assert resumed.keys() == [f"{key}:retry-2"] and len(runs(root)) == 3 and owed(root) == {}
