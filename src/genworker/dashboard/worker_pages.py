"""The data behind a worker's console pages that the aggregator's blocks do not carry: the autonomy
charts (heartbeat runs, interruption-budget use and inbox arrivals per day, inbox depth now), the
calendar as a timeline (duties' next fires, recent runs, goals' and milestones' due dates on one time
axis), what the worker remembers (episodes and statements by partition, searchable) and its
supervision (policies, and the supervisor's records of recent runs).

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
from genworker.dashboard.text import clip
from genworker.dashboard.usage import FAILED_STATES, window_runs
from genworker.memory.episodes import EpisodeStore, ScanIssue, tenant_memory_dir, worker_memory_dir
from genworker.memory.models import Episode, ScopeKind
from genworker.memory.preferences import Statement, StatementStore
from genworker.supervision.catalog import list_policies
from genworker.supervision.decisions import SupervisorState
from genworker.supervision.errors import PolicyError
from genworker.supervision.service import record_path, run_record

__all__ = [
    "INBOX_ITEMS",
    "MEMORY_SHOWN",
    "SUPERVISED_SHOWN",
    "TIMELINE_PAST_DAYS",
    "autonomy",
    "memory",
    "supervision",
    "timeline",
]

INBOX_ITEMS: Final = 5000  # newest-first cap on the items read for the arrivals chart
TIMELINE_PAST_DAYS: Final = 7
TIMELINE_RUNS: Final = 200
MEMORY_SHOWN: Final = 200  # newest matching entries answered
MEMORY_TEXT: Final = 1500  # characters of an entry's text
SUPERVISED_SHOWN: Final = 50  # newest supervision records answered
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


def _entry(kind: str, ident: str, scope: str, title: str, text: str, at: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "type": kind,  # episode | summary | preference | decision
        "id": ident,
        "partition": scope.partition(":")[0],
        "scope": scope,
        "title": title,
        "text": clip(text, MEMORY_TEXT),
        "created_at": at.isoformat(),
        **extra,
    }


def _episode(e: Episode) -> dict[str, Any]:
    p = e.provenance
    return _entry(e.kind, e.episode_id, e.scope, e.title, e.body, e.created_at, source=e.source, status="active",
                  weight=round(e.weight, 3), recall_count=e.recall_count, run_id=p.run_id, duty_id=p.duty_id,
                  thread_id=p.thread_id, channel=p.channel)  # fmt: skip


def _statement(s: Statement) -> dict[str, Any]:
    ev = s.evidence
    return _entry(s.kind, s.id, s.scope, s.key, s.value, s.created_at, source="statement", status=s.status,
                  quote=ev.quote, run_id=ev.run_id, thread_id=ev.thread_id)  # fmt: skip


def _matches(entry: dict[str, Any], words: list[str]) -> bool:
    text = f"{entry['title']}\n{entry['text']}\n{entry.get('quote') or ''}".casefold()
    return all(w in text for w in words)


async def memory(ctx: BlockContext, query: str, partition: ScopeKind | None) -> dict[str, Any]:
    """The worker's episodes, summaries, preferences and decisions, and the tenant's shared episodes, newest
    first; `query`'s words must all appear (case-insensitive), `partition` keeps one scope kind. Read-only."""
    root = ctx.runtime.registry.root
    own = worker_memory_dir(root, ctx.tenant_id, ctx.worker_id)

    def read() -> tuple[list[dict[str, Any]], list[ScanIssue]]:
        issues: list[ScanIssue] = []
        found = [
            _episode(e)
            for folder in (own, tenant_memory_dir(root, ctx.tenant_id))
            for e in EpisodeStore(folder).scan(issues)
        ]
        found += [_statement(s) for kind in ("preference", "decision") for s in StatementStore(own, kind).all()]
        return found, issues

    entries, issues = await asyncio.to_thread(read)
    counts = {k.value: sum(e["partition"] == k.value for e in entries) for k in ScopeKind}
    words = query.casefold().split()
    shown = [e for e in entries if (partition is None or e["partition"] == partition.value) and _matches(e, words)]
    shown.sort(key=lambda e: e["created_at"], reverse=True)
    return {
        "worker_id": ctx.worker_id,
        "generated_at": ctx.now.isoformat(),
        "query": query,
        "partition": partition.value if partition else None,
        "counts": counts,
        "matched": len(shown),
        "entries": shown[:MEMORY_SHOWN],
        "unreadable": [f"{i.path.name}: {i.error}" for i in issues],
    }


async def supervision(ctx: BlockContext) -> dict[str, Any]:
    """The worker's supervisor policies (a file that cannot be used with its error) and the records the
    supervisor kept with its newest runs (newest first), with the count in each supervisor state."""
    root = ctx.runtime.registry.root
    t, w = ctx.tenant_id, ctx.worker_id
    folder = record_path(root, t, w, "run").parent

    def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        records: list[dict[str, Any]] = []
        unreadable: list[str] = []
        files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() else []
        for path in files[:SUPERVISED_SHOWN]:
            try:
                record = run_record(root, t, w, path.stem)
            except (PolicyError, ValueError, OSError) as exc:
                unreadable.append(f"{path.name}: {exc}".replace(str(root) + "/", ""))
                continue
            if record is not None:
                at = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
                records.append({**record, "updated_at": at})
        return list_policies(folder.parent.parent), records, unreadable

    policies, records, unreadable = await asyncio.to_thread(read)
    return {
        "worker_id": w,
        "generated_at": ctx.now.isoformat(),
        "policies": policies,
        "counts": {s.value: sum(r.get("state") == s.value for r in records) for s in SupervisorState},
        "records": records,
        "unreadable": unreadable,
    }
