"""The data behind a worker's console pages that are drawn rather than listed: the autonomy charts
(heartbeat runs, interruption-budget use and inbox arrivals per day, inbox depth now) and the calendar
as a timeline (duties' next fires, recent runs, goals' and milestones' due dates on one time axis).

The API layer names the worker (one the key may use); nothing here reads a request or writes."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from genworker.autonomy.briefs import local_day
from genworker.autonomy.inbox import InboxState
from genworker.dashboard import blocks_worker
from genworker.dashboard.aggregator import BlockContext
from genworker.dashboard.blocks_work import router_of
from genworker.dashboard.usage import FAILED_STATES, window_runs

__all__ = ["INBOX_ITEMS", "TIMELINE_PAST_DAYS", "autonomy", "timeline"]

INBOX_ITEMS: Final = 5000  # newest-first cap on the items read for the arrivals chart
TIMELINE_PAST_DAYS: Final = 7
TIMELINE_RUNS: Final = 200
_WAITING: Final = (InboxState.PENDING, InboxState.PROCESSING, InboxState.FAILED)


def _days(last: date, days: int) -> list[date]:
    return [last - timedelta(days=n) for n in range(days - 1, -1, -1)]


async def autonomy(ctx: BlockContext, days: int) -> dict[str, Any]:
    """Per UTC day (oldest first, every day present): heartbeat runs and failures, inbox arrivals by
    the state each item is in now; per local day of the budget's zone: interruptions used of the limit;
    and the inbox's depth now (items in each state)."""
    t, w = ctx.tenant_id, ctx.worker_id
    day_list = _days(ctx.now.astimezone(UTC).date(), days)
    since = datetime.combine(day_list[0], datetime.min.time(), UTC)
    runs = [r for r in await window_runs(ctx.runtime, t, [w], since) if r.provenance.source_type == "heartbeat"]
    beats: dict[date, dict[str, int]] = {d: {"runs": 0, "failed": 0} for d in day_list}
    for run in runs:
        day = beats.get(run.timings.queued_at.astimezone(UTC).date())
        if day is not None:
            day["runs"] += 1
            day["failed"] += run.state in FAILED_STATES
    inbox = ctx.runtime.services.inbox
    counts = await inbox.counts(t, w)
    total = sum(counts.values())
    items = await inbox.list(t, w, None, limit=INBOX_ITEMS, offset=max(0, total - INBOX_ITEMS))
    arrivals: dict[date, dict[str, int]] = {d: defaultdict(int) for d in day_list}
    for item in items:
        day_counts = arrivals.get(item.created_at.astimezone(UTC).date())
        if day_counts is not None:
            day_counts[item.state.value] += 1
    briefs = ctx.runtime.services.briefs
    policy = briefs.policy(t, w)
    today = date.fromisoformat(local_day(policy, briefs.now()))
    budget_days = [d.isoformat() for d in _days(today, days)]
    used = await asyncio.to_thread(lambda: [briefs.store.budget(t, w, d).used for d in budget_days])
    return {
        "worker_id": w,
        "generated_at": ctx.now.isoformat(),
        "days": [d.isoformat() for d in day_list],
        "heartbeat": {
            "interval_s": ctx.runtime.services.heartbeat.settings.interval_s,
            "per_day": [{"day": d.isoformat(), **v} for d, v in beats.items()],
        },
        "interruption_budget": {
            "timezone": policy.quiet_hours.timezone,
            "limit": policy.interruption_budget_per_day,
            "per_day": [{"day": d, "used": n} for d, n in zip(budget_days, used, strict=True)],
        },
        "inbox": {
            "depth": sum(counts[s] for s in _WAITING),
            "counts": {s.value: counts[s] for s in InboxState},
            "per_day": [
                {"day": d.isoformat(), **{s.value: v.get(s.value, 0) for s in InboxState}} for d, v in arrivals.items()
            ],
        },
    }


async def timeline(ctx: BlockContext) -> dict[str, Any]:
    """Everything of the worker on one time axis, from TIMELINE_PAST_DAYS ago to the calendar's end:
    recent runs (queued to finished), the calendar's next fires, and goals' and milestones' due dates."""
    calendar = await blocks_worker.calendar(ctx)
    start = ctx.now - timedelta(days=TIMELINE_PAST_DAYS)
    end = ctx.now + timedelta(days=calendar["window_days"])
    found = await router_of(ctx.runtime).tasks.list_runs(ctx.tenant_id, ctx.worker_id, limit=TIMELINE_RUNS)
    runs = [
        {
            "run_id": r.run_id,
            "state": r.state.value,
            "source_type": r.provenance.source_type,
            "duty_id": r.provenance.duty_id,
            "start": r.timings.queued_at.astimezone(UTC).isoformat(),
            "end": r.timings.finished_at.astimezone(UTC).isoformat() if r.timings.finished_at else None,
        }
        for r in found
        if r.timings.queued_at >= start
    ]
    goals = await asyncio.to_thread(ctx.runtime.services.goals.goals, ctx.tenant_id, ctx.worker_id)
    due: list[dict[str, Any]] = []
    for goal in goals:
        if goal.deadline is not None:
            due.append({"goal_id": goal.goal_id, "title": goal.title, "status": goal.status.value,
                        "milestone": None, "due": goal.deadline.isoformat()})  # fmt: skip
        for milestone in goal.milestones:
            if milestone.deadline is not None:
                due.append({"goal_id": goal.goal_id, "title": milestone.title, "status": milestone.status,
                            "milestone": goal.title, "due": milestone.deadline.isoformat()})  # fmt: skip
    return {
        "worker_id": ctx.worker_id,
        "generated_at": ctx.now.isoformat(),
        "timezone": calendar["timezone"],
        "now": ctx.now.astimezone(UTC).isoformat(),
        "start": start.astimezone(UTC).isoformat(),
        "end": end.astimezone(UTC).isoformat(),
        "upcoming": calendar["entries"],
        "runs": runs,
        "due": sorted(due, key=lambda d: d["due"]),
    }
