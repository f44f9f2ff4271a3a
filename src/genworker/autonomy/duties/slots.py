"""Schedule slots: which instants a schedule trigger names, which of them a tick fires under the
trigger's misfire policy, and the idempotency key of one fire.

A slot is the scheduled instant itself, never "now": two runtimes, a restart or a reload that look at
the same slot compute the same key. Interval slots are anchored at the Unix epoch so they do not move
when the process restarts, and the scheduler's job ticks on them (`first_run_time`).
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from datetime import UTC, datetime, timedelta
from typing import Final, assert_never

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger

from genworker.workspace.models.cron import cron_trigger
from genworker.workspace.models.duty import DutySpec, ScheduleTrigger

__all__ = ["EPOCH", "aps_trigger", "due_slots", "duty_version", "fire_key", "first_run_time", "select_slots"]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_TICK: Final = timedelta(microseconds=1)


def duty_version(duty: DutySpec) -> str:
    """sha256 (12 hex) of the duty's validated content: a reload that leaves the duty as it was keeps it."""
    canonical = json.dumps(duty.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def fire_key(duty_id: str, trigger_id: str, slot: str, version: str) -> str:
    """`duty_id:trigger_id:slot:duty_version`; `slot` is the UTC ISO time (or `event-{id}` for events)."""
    return f"{duty_id}:{trigger_id}:{slot}:{version}"


def aps_trigger(trigger: ScheduleTrigger) -> BaseTrigger:
    """The APScheduler trigger: cron in the trigger's IANA zone, or an epoch-anchored interval."""
    if trigger.interval is not None:
        return IntervalTrigger(seconds=trigger.interval, start_date=EPOCH, timezone=UTC)
    assert trigger.cron is not None
    return cron_trigger(trigger.cron, trigger.timezone)


def first_run_time(trigger: ScheduleTrigger, now: datetime) -> datetime:
    """When the job's first tick (the start-up catch-up) runs: at once. For an interval that is the
    latest slot at or before `now`: APScheduler times each later fire as the previous one plus the
    interval, so only a first fire on a slot keeps the rest on the slots."""
    if trigger.interval is None:
        return now  # a cron trigger finds its next fire from the wall clock
    step = timedelta(seconds=trigger.interval)
    return EPOCH + (now.astimezone(UTC) - EPOCH) // step * step


def due_slots(trigger: BaseTrigger, after: datetime, until: datetime, *, keep: int | None = None) -> list[datetime]:
    """Slots in (after, until], oldest first, in UTC; with `keep`, only the newest `keep` of them.

    A wall-clock time that repeats when the clocks go back is one slot (its first occurrence)."""
    slots: deque[datetime] = deque(maxlen=keep)
    cursor, wall = after.astimezone(UTC), None
    while True:
        nxt = trigger.get_next_fire_time(None, cursor + _TICK)  # UTC arithmetic: local +1µs can fold back
        if nxt is None or nxt > until:
            return list(slots)
        if nxt.replace(tzinfo=None) != wall:
            slots.append(nxt.astimezone(UTC))
        cursor, wall = nxt.astimezone(UTC), nxt.replace(tzinfo=None)


def select_slots(
    trigger: ScheduleTrigger,
    due: list[datetime],
    now: datetime,
    grace: timedelta,
    running_since: datetime | None = None,
) -> list[datetime]:
    """Which `due` slots to fire now, oldest first.

    The latest slot is on time, and always fires, when it came due while this scheduler was running the
    trigger (at or after `running_since`), however late its tick, or is no older than `grace`. The rest
    were missed (no runtime was running, or the previous fire was still running) and follow
    `misfire_policy` (never more than `catch_up_max_runs`)."""
    if not due:
        return []
    latest = due[-1]
    on_time = now - latest <= grace or (running_since is not None and latest >= running_since)
    match trigger.misfire_policy:
        case "skip":
            return [latest] if on_time else []
        case "run_once":
            return [latest]
        case "catch_up_bounded":
            window = timedelta(seconds=trigger.catch_up_window)
            kept = [s for s in due if now - s <= window or (s == latest and on_time)]
            return kept[-trigger.catch_up_max_runs :]
        case _ as unknown:
            assert_never(unknown)
