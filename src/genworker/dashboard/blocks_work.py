"""Dashboard blocks about the worker's work: tasks, runs, pending actions, activity, decisions.

Run records are read once per request (`BlockContext.shared`) and shared by the blocks built on them.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from genworker.dashboard.aggregator import BlockContext
from genworker.dashboard.run_view import engine_state, failure_reason, governance
from genworker.dashboard.text import clip
from genworker.runtime.composition import Runtime
from genworker.worker.confirmations.models import Confirmation
from genworker.worker.governance.snapshots import SnapshotStore
from genworker.worker.router import WorkerRouter
from genworker.worker.task import ACTIVE_STATES, RunRecord, RunState

__all__ = [
    "activity",
    "decisions",
    "pending",
    "recent_runs",
    "router_of",
    "runs",
    "suggestions",
    "tasks",
]

RUN_WINDOW = 100  # runs the dashboard looks at, newest first
SHOWN = 20


def router_of(runtime: Runtime) -> WorkerRouter:
    return runtime.services.router


async def recent_runs(ctx: BlockContext) -> list[RunRecord]:
    async def load() -> list[RunRecord]:
        return await router_of(ctx.runtime).tasks.list_runs(ctx.tenant_id, ctx.worker_id, limit=RUN_WINDOW)

    found: list[RunRecord] = await ctx.shared("runs", load)
    return found


async def confirmations(ctx: BlockContext) -> list[Confirmation]:
    async def load() -> list[Confirmation]:
        store = router_of(ctx.runtime).confirmations
        return await asyncio.to_thread(store.list, ctx.tenant_id, ctx.worker_id)

    found: list[Confirmation] = await ctx.shared("confirmations", load)
    return found


def _provenance(run: RunRecord) -> dict[str, Any]:
    p = run.provenance
    fields = {
        "source_type": p.source_type,
        "source_id": p.source_id,
        "goal_id": p.goal_id,
        "duty_id": p.duty_id,
        "trigger_id": p.trigger_id,
        "approval_ref": p.approval_ref,
        "scheduled_for": p.scheduled_for.isoformat() if p.scheduled_for else None,
    }
    return {k: v for k, v in fields.items() if v}


def _task(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "state": run.state.value,
        "queued_at": run.timings.queued_at.isoformat(),
        "finished_at": run.timings.finished_at.isoformat() if run.timings.finished_at else None,
        "provenance": _provenance(run),
        "error": asdict(run.error) if run.error else None,
        "reason": failure_reason(run),
        "waiting_on": run.pending_approval.tool if run.pending_approval else None,
        "undelivered": sum(d.state in _UNDELIVERED for d in run.deliveries),  # a duty result not (yet) sent
    }


_UNDELIVERED = frozenset({"failed", "retrying", "given_up", "outcome_unknown"})


_FAILED = frozenset({RunState.FAILED, RunState.BUDGET_EXCEEDED, RunState.INTERRUPTED})
_ENDED = frozenset({RunState.CANCELLED, RunState.SUPERSEDED})  # stopped on purpose (rejected, replaced)


async def tasks(ctx: BlockContext) -> dict[str, Any]:
    found = await recent_runs(ctx)
    active = [_task(r) for r in found if r.state in ACTIVE_STATES]
    done = [_task(r) for r in found if r.state == RunState.COMPLETED]
    failed = [_task(r) for r in found if r.state in _FAILED]
    ended = [_task(r) for r in found if r.state in _ENDED]
    return {
        "active": active[:SHOWN],
        "done": done[:SHOWN],
        "failed": failed[:SHOWN],
        "ended": ended[:SHOWN],
        "window": RUN_WINDOW,
    }


def _run(run: RunRecord) -> dict[str, Any]:
    costs = [u.cost_usd for u in run.model_usage if u.cost_usd is not None]
    return {
        **_task(run),
        "skill_id": run.skill_id,
        "engine": run.engine,
        **engine_state(run),
        "execution_depth": run.provenance.execution_depth,
        "run_ms": run.timings.run_ms,
        "deliverables": [
            {"kind": d.kind, "title": d.title, "ref": d.ref, "content": clip(d.content, 500)} for d in run.deliverables
        ],
        "tool_calls": [{"name": c.name, "outcome": str(c.outcome), "code": c.code} for c in run.tool_calls],
        "checks": [{"check": c.check, "verdict": c.verdict, "detail": c.detail} for c in run.checks],
        "deliveries": [
            {"to": d.to, "format": d.format, "state": d.state, "delivered_to": d.delivered_to, "error": d.error}
            for d in run.deliveries
        ],
        "escalations": [
            {"condition": e.condition, "target": e.target, "kind": e.kind, "state": e.state, "error": e.error}
            for e in run.escalations
        ],
        "model_usage": [
            {
                "tier": u.tier,
                "model": u.model,
                "latency_ms": round(u.latency_ms, 1),
                "tokens": u.prompt_tokens + u.completion_tokens,
                "cost_usd": u.cost_usd,
                "error": u.error,
            }
            for u in run.model_usage
        ],
        "tokens": sum(u.prompt_tokens + u.completion_tokens for u in run.model_usage),
        "cost_usd": round(sum(costs), 6) if costs else None,
    }


async def runs(ctx: BlockContext) -> dict[str, Any]:
    found = await recent_runs(ctx)
    costs = [u.cost_usd for r in found for u in r.model_usage if u.cost_usd is not None]
    return {
        "runs": [_run(r) for r in found[:SHOWN]],
        "totals": {
            "runs": len(found),
            "tokens": sum(u.prompt_tokens + u.completion_tokens for r in found for u in r.model_usage),
            "model_calls": sum(len(r.model_usage) for r in found),
            "cost_usd": round(sum(costs), 6) if costs else None,
        },
    }


async def pending(ctx: BlockContext) -> dict[str, Any]:
    waiting = [c for c in await confirmations(ctx) if c.status == "pending"]
    return {
        "confirmations": [
            {
                "id": c.confirmation_id,
                "text": c.text,
                "run_id": c.run_id,
                "reasons": list(c.reasons),
                "created_at": c.created_at,
            }
            for c in waiting
        ]
    }


async def suggestions(ctx: BlockContext) -> dict[str, Any]:
    """Pending suggestions, through the same backend the IM commands use."""
    backend = ctx.runtime.services.command_backend
    found = await asyncio.to_thread(backend.suggestions, ctx.tenant_id, ctx.worker_id)
    return {"suggestions": [dict(s) for s in found]}


async def activity(ctx: BlockContext) -> list[dict[str, Any]]:
    """Run state changes and confirmation decisions, newest first."""
    items: list[dict[str, Any]] = []
    for run in await recent_runs(ctx):
        for change in run.history:
            items.append(
                {
                    "at": change.at.isoformat(),
                    "kind": "run",
                    "run_id": run.run_id,
                    "text": f"{run.provenance.source_type} run {change.target.value.replace('_', ' ')}"
                    + (f": {change.note}" if change.note else ""),
                }
            )
    for c in await confirmations(ctx):
        items.append({"at": c.created_at, "kind": "confirmation", "run_id": c.run_id, "text": f"asked: {c.text}"})
        if c.decided_at:
            items.append(
                {
                    "at": c.decided_at,
                    "kind": "confirmation",
                    "run_id": c.run_id,
                    "text": f"{c.status} by {c.decided_by}",
                }
            )
    items.sort(key=lambda i: i["at"], reverse=True)
    return items[:40]


async def decisions(ctx: BlockContext) -> list[dict[str, Any]]:
    """Governance decisions of recent runs with their reasons (from the policy snapshot when kept)."""
    snapshots = SnapshotStore(ctx.runtime.registry.root)
    found = [r for r in await recent_runs(ctx) if r.provenance.governance_decision is not None][:SHOWN]
    return await asyncio.to_thread(lambda: [_decision(snapshots, r) for r in found])


def _decision(snapshots: SnapshotStore, run: RunRecord) -> dict[str, Any]:
    return {
        "at": run.timings.queued_at.isoformat(),
        "run_id": run.run_id,
        "source_type": run.provenance.source_type,
        "duty_id": run.provenance.duty_id,
        **(governance(snapshots, run) or {}),
    }
