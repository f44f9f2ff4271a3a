"""Dashboard blocks about the worker itself: profile, calendar, goals, capabilities, channels, briefs,
and the tenant's workspace files the runtime refused (load errors).

They read the loaded workspace snapshot and the live schedulers / tool runtime; nothing here writes.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from genworker.autonomy.duties.scheduler import job_id as duty_job_id
from genworker.autonomy.duties.slots import aps_trigger
from genworker.autonomy.goals import GoalHealth, LastVerdict, VerdictLog, goal_health
from genworker.autonomy.heartbeat.scheduler import job_id as heartbeat_job_id
from genworker.dashboard.aggregator import BlockContext
from genworker.dashboard.text import clip
from genworker.workspace.models import DutyStatus, Goal
from genworker.workspace.models.duty import ConditionTrigger, ScheduleTrigger
from genworker.workspace.snapshot import Worker

__all__ = [
    "briefs",
    "calendar",
    "capabilities",
    "channels",
    "goals",
    "load_errors",
    "profile",
    "worker_zone",
    "workers",
]

CALENDAR_DAYS = 7
FIRES_PER_TRIGGER = 5


def worker_zone(worker: Worker) -> str:
    """The worker's time zone: the zone of its first cron schedule (UTC when it has none)."""
    for duty in worker.duties.values():
        for trigger in duty.triggers:
            if isinstance(trigger, ScheduleTrigger) and trigger.cron is not None:
                return trigger.timezone
    return "UTC"


async def workers(ctx: BlockContext) -> list[dict[str, Any]]:
    state = ctx.runtime.registry.tenant(ctx.tenant_id)
    if state is None:
        return []
    listed = [
        {
            "worker_id": w.worker_id,
            "name": w.persona.identity.display_name,
            "role": w.persona.identity.role,
            "mode": w.persona.mode.value,
            "loaded": True,
        }
        for w in state.workers.values()
        if ctx.principal.can_use(w.worker_id)
    ]
    listed += [
        {"worker_id": f.worker_id, "name": f.worker_id, "role": "", "mode": "", "loaded": False,
         "error": str(f.errors[0]) if f.errors else "failed to load"}
        for f in state.failures.values()
        if ctx.principal.can_use(f.worker_id)
    ]  # fmt: skip
    return sorted(listed, key=lambda w: w["worker_id"])


async def load_errors(ctx: BlockContext) -> dict[str, Any]:
    """Files of this tenant the runtime refused, for the workers the key may use: a rejected reload
    (`serving: last_good`, the previous version still runs) or a worker that never loaded (`none`)."""
    described = ctx.runtime.registry.describe()["tenants"].get(ctx.tenant_id, {})
    problems: list[dict[str, Any]] = []
    if described.get("reload_errors"):
        problems.append({"worker_id": None, "serving": "last_good", "errors": described["reload_errors"]})
    for worker_id, entry in described.get("workers", {}).items():
        if not ctx.principal.can_use(worker_id):
            continue
        if entry["status"] == "failed":
            problems.append({"worker_id": worker_id, "serving": "none", "errors": entry["errors"]})
        elif entry.get("reload_errors"):
            problems.append({"worker_id": worker_id, "serving": "last_good", "errors": entry["reload_errors"]})
    return {"problems": problems}


async def profile(ctx: BlockContext) -> dict[str, Any]:
    w = ctx.worker
    identity = w.persona.identity
    return {
        "worker_id": w.worker_id,
        "name": identity.display_name,
        "role": identity.role,
        "department": identity.department,
        "reports_to": identity.reports_to,
        "background": identity.background,
        "mode": w.persona.mode.value,
        "timezone": worker_zone(w),
        "duties": len(w.duties),
        "goals": len(w.goals),
        "skills": len(w.skills),
        "contacts": len(w.contacts),
        "rules": len(w.rules),
        "version": w.version,
        "warnings": [str(i) for i in w.warnings],
    }


async def calendar(ctx: BlockContext) -> dict[str, Any]:
    """Next fires of every schedule trigger, condition check, heartbeat and goal check, soonest first."""
    zone_name = worker_zone(ctx.worker)
    zone = ZoneInfo(zone_name)
    entries = [*_duty_entries(ctx), *_check_entries(ctx)]
    entries.sort(key=lambda e: e["at"])
    for entry in entries:
        at = entry["at"]
        entry["at"] = at.astimezone(UTC).isoformat()
        entry["local"] = at.astimezone(zone).strftime("%a %Y-%m-%d %H:%M %Z")
    return {"timezone": zone_name, "window_days": CALENDAR_DAYS, "entries": entries}


def _duty_entries(ctx: BlockContext) -> list[dict[str, Any]]:
    until = ctx.now + timedelta(days=CALENDAR_DAYS)
    jobs = ctx.runtime.services.duties.jobs()
    entries: list[dict[str, Any]] = []
    for duty in ctx.worker.duties.values():
        if duty.status != DutyStatus.ACTIVE:
            continue
        for trigger in duty.triggers:
            base = {"kind": "duty", "duty_id": duty.duty_id, "title": duty.title, "trigger_id": trigger.id}
            if isinstance(trigger, ScheduleTrigger):
                rule = trigger.cron or every(trigger.interval or 0)
                for at in _next_fires(trigger, ctx.now, until):
                    entries.append({**base, "at": at, "schedule": rule, "schedule_timezone": trigger.timezone})
            elif isinstance(trigger, ConditionTrigger):
                check = getattr(jobs.get(duty_job_id(ctx.worker, duty.duty_id, trigger.id)), "next_run_time", None)
                if check is not None:
                    rule = f"check {trigger.metric} {trigger.rule} {every(trigger.check_interval)}"
                    entries.append({**base, "kind": "condition", "at": check, "schedule": rule})
    return entries


def _check_entries(ctx: BlockContext) -> list[dict[str, Any]]:
    """The heartbeat's next run for this worker and the next goal progress check (all workers)."""
    entries: list[dict[str, Any]] = []
    heartbeat, lifecycle = ctx.runtime.services.heartbeat, ctx.runtime.services.lifecycle
    job = heartbeat.scheduler.jobs().get(heartbeat_job_id(ctx.tenant_id, ctx.worker_id))
    beat = getattr(job, "next_run_time", None)
    if beat is not None:
        title = "Heartbeat: inbox and goal attention"
        rule = every(heartbeat.settings.interval_s)
        entries.append({"kind": "heartbeat", "title": title, "at": beat, "schedule": rule})
    if ctx.worker.goals:
        progress_at = getattr(lifecycle.jobs().get("lifecycle:goals"), "next_run_time", None)
        if progress_at is not None:
            rule = every(lifecycle.settings.goal_check_s)
            entries.append({"kind": "goal_check", "title": "Goal progress check", "at": progress_at, "schedule": rule})
    return entries


def every(seconds: float) -> str:
    """`every 30 min`, `every 2 h`, `every 45 s`, `every 1 d`."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"every {seconds / size:g} {unit}"
    return f"every {seconds:g} s"


def _next_fires(trigger: ScheduleTrigger, now: datetime, until: datetime) -> list[datetime]:
    aps = aps_trigger(trigger)
    fires: list[datetime] = []
    cursor = now
    while len(fires) < FIRES_PER_TRIGGER:
        nxt = aps.get_next_fire_time(None, cursor + timedelta(microseconds=1))
        if nxt is None or nxt > until:
            break
        fires.append(nxt)
        cursor = nxt.astimezone(UTC)
    return fires


async def goals(ctx: BlockContext) -> list[dict[str, Any]]:
    """Goals as on disk now (through the goal aggregate), with their health and the goal
    evaluator's last verdict on a run (reasons included)."""
    aggregate = ctx.runtime.services.goals
    found: list[Goal] = await asyncio.to_thread(aggregate.goals, ctx.tenant_id, ctx.worker_id)
    verdicts = await asyncio.to_thread(VerdictLog(ctx.runtime.registry.root).last, ctx.tenant_id, ctx.worker_id)
    zone = ZoneInfo(worker_zone(ctx.worker))
    today = ctx.now.astimezone(zone).date()
    return [_goal(g, goal_health(g, today), verdicts.get(g.goal_id)) for g in sorted(found, key=lambda g: g.goal_id)]


def _goal(goal: Goal, health: GoalHealth, last: LastVerdict | None = None) -> dict[str, Any]:
    status = {t.id: t.status for t in goal.tasks()}
    open_states = ("pending", "in_progress", "blocked")
    blocked = [
        {
            "id": t.id,
            "title": t.title,
            "waiting_on": [b for b in t.blocked_by if status.get(b) in open_states],
        }
        for t in goal.tasks()
        if t.status == "blocked"
        or (t.status in open_states and any(status.get(b) in open_states for b in t.blocked_by))
    ]
    done = sum(1 for s in status.values() if s == "done")
    return {
        "goal_id": goal.goal_id,
        "title": goal.title,
        "status": goal.status.value,
        "priority": goal.priority,
        "deadline": goal.deadline.isoformat() if goal.deadline else None,
        "progress": {"done": done, "total": len(status)},
        "health": health.health,
        "completion": health.completion,
        "overdue_milestones": list(health.overdue_milestones),
        "milestones": [
            {
                "id": m.id,
                "title": m.title,
                "status": m.status,
                "deadline": m.deadline.isoformat() if m.deadline else None,
                "tasks": [
                    {"id": t.id, "title": t.title, "status": t.status, "blocked_by": list(t.blocked_by)}
                    for t in m.tasks
                ],
            }
            for m in goal.milestones
        ],
        "blocked_tasks": blocked,
        "last_verdict": last.as_dict() if last is not None else None,
    }


async def capabilities(ctx: BlockContext) -> dict[str, Any]:
    runtime, worker = ctx.runtime, ctx.worker
    state = runtime.registry.tenant(ctx.tenant_id)
    if state is None:
        raise LookupError(f"tenant {ctx.tenant_id!r} is not loaded")
    pipeline = runtime.tools.pipeline_for(worker)
    scope = runtime.tools.scope(state.tenant, worker, "dashboard")
    tools = []
    for name in pipeline.names():
        tool = pipeline.get(name)
        if tool is None:
            continue
        spec = pipeline.resolved_spec(tool.spec, scope)
        tools.append(
            {
                "name": spec.name,
                "effect": spec.effect.value if spec.effect else None,
                "risk": spec.risk_level.value,
                "requires_approval": spec.requires_approval,
                "source": spec.source,
                "description": clip(spec.description.split("\n", 1)[0], 200),
            }
        )
    live = {
        c.name: c
        for c in runtime.tools.statuses()
        if c.details.get("tenant_id") == ctx.tenant_id and c.details.get("worker_id") == ctx.worker_id
    }
    mcp = []
    for config in runtime.tools.mcp_configs(state.tenant, worker):
        status = live.get(f"mcp:{config.name}")
        mcp.append(
            {
                "name": config.name,
                "transport": str(config.transport),
                "status": status.status.value if status else "not_started",
                "reason": status.reason if status else "",
                "tools": list(status.details.get("tools", ())) if status else [],
            }
        )
    skills = [
        {"name": s.name, "level": s.level.value, "description": clip(s.spec.description, 200), "file": s.file}
        for s in sorted(worker.skills.values(), key=lambda s: s.name)
    ]
    return {"tools": sorted(tools, key=lambda t: t["name"]), "skills": skills, "mcp_servers": mcp}


async def channels(ctx: BlockContext) -> dict[str, Any]:
    """The worker's channel bindings and whether the runtime's channel ingress can serve them."""
    service = ctx.runtime.services.channels
    registry = service.registry
    component = ctx.runtime.components.get("channels")
    ingress = component.status.value if component is not None else "not_started"
    processor = service.processor
    can_reply = processor.replier is not None
    long_connections = ctx.runtime.services.long_connections
    listed = []
    for b in registry.bindings(ctx.tenant_id, ctx.worker_id):
        state = long_connections.state(b.adapter_id)
        status = state.status if state is not None else ingress  # a long connection's own status
        listed.append(
            {
                "adapter_id": b.adapter_id,
                "platform": b.platform,
                "connection_mode": b.channel.connection_mode,
                "chat_ids": list(b.channel.chat_ids),
                "credentials": b.credentials is not None,
                "status": "missing_credentials" if b.credentials is None else "degraded" if b.limitation else status,
                "note": b.limitation,  # e.g. a long connection without its SDK or credentials
                "webhook": f"/api/v1/channel/{b.adapter_id}/webhook",
                "long_connection": state.as_dict() if state is not None else None,  # connected, reconnects, ...
            }
        )
    owed = {  # what IM users are still owed
        "undelivered": await processor.undelivered(ctx.tenant_id, ctx.worker_id),
        "attention": await processor.needs_attention(ctx.tenant_id, ctx.worker_id),
    }
    return {"ingress": ingress, "can_reply": can_reply, "channels": listed, **owed}


async def briefs(ctx: BlockContext) -> dict[str, Any]:
    """Recent briefs, the items waiting for the next one, and when it is due."""
    service = ctx.runtime.services.briefs
    store = service.store
    sent, pending = await asyncio.gather(
        asyncio.to_thread(store.list, ctx.tenant_id, ctx.worker_id, 5),
        asyncio.to_thread(store.pending, ctx.tenant_id, ctx.worker_id),
    )
    jobs = service.jobs()
    nxt = next(
        (
            getattr(j, "next_run_time", None)
            for ident, j in jobs.items()
            if ident.endswith(f"{ctx.tenant_id}/{ctx.worker_id}")
        ),
        None,
    )
    return {
        "next_at": nxt.astimezone(UTC).isoformat() if nxt is not None else None,
        "pending": [
            {
                "title": i.title,
                "section": str(i.section),
                "priority": i.priority,
                "created_at": i.created_at.isoformat(),
            }
            for i in pending
        ],
        "briefs": [
            {
                "brief_id": b.brief_id,
                "created_at": b.created_at.isoformat(),
                "items": sum(len(items) for items in b.sections.values()),
                "delivered": b.delivered,
                "delivery_error": b.delivery_error,
                "text": clip(b.text, 2000),
            }
            for b in sent
        ],
    }
