"""The run view: one run as a whole — provenance, governance decision, the context's segments and their
tokens, model calls, tool calls (with the arguments the tool audit kept, secrets already redacted there),
deliverables, contract, history, its AG-UI event timeline (both from the run's trace,
genworker.streaming.trace) — and why it failed, when it did. Tenant and worker come from the caller's
key (the API layer)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from genworker.runtime.composition import Runtime
from genworker.streaming.trace import RunTraceError, RunTraceFile, read_run_trace
from genworker.supervision.errors import PolicyError
from genworker.supervision.service import run_record
from genworker.tools.audit import WORKER_AUDIT_FILE, run_audit_records
from genworker.worker.governance.errors import SnapshotError
from genworker.worker.governance.snapshots import SnapshotStore
from genworker.worker.task import ModelUsage, RunRecord, RunState

__all__ = [
    "AUDIT_SCAN_BYTES",
    "engine_state",
    "failure_reason",
    "governance",
    "model_calls",
    "run_detail",
    "tool_audit",
    "trace_view",
]

AUDIT_SCAN_BYTES = 8 * 1024 * 1024  # the newest part of a worker's tool audit searched for a run's calls
DELIVERABLE_CHARS = 20_000
_ENDED_BADLY = frozenset({RunState.FAILED, RunState.BUDGET_EXCEEDED, RunState.INTERRUPTED, RunState.CANCELLED})


def failure_reason(run: RunRecord) -> str | None:
    """Why a run that did not complete ended so; None for a run that did not end badly.

    The run's error first, then the note of the state change that ended it, then a failed model call;
    never empty for a failed run."""
    if run.state not in _ENDED_BADLY:
        return None
    if run.error is not None:
        return f"{run.error.code}: {run.error.message}" if run.error.message else run.error.code
    ending = next((c for c in reversed(run.history) if c.target is run.state), None)
    if ending is not None and ending.note:
        return ending.note
    failed_call = next((u for u in reversed(run.model_usage) if u.error), None)
    if failed_call is not None:
        return f"model call to {failed_call.model or failed_call.tier} failed: {failed_call.error}"
    return f"the run ended {run.state.value} and recorded no reason"


def tool_audit(workspace_root: Path, run: RunRecord) -> dict[str, Mapping[str, Any]]:
    """The run's tool audit records by call id (arguments as audit stored them: redacted, clipped),
    from the newest AUDIT_SCAN_BYTES of the worker's audit file; blocking."""
    path = workspace_root / "tenants" / run.tenant_id / "workers" / run.worker_id / WORKER_AUDIT_FILE
    return run_audit_records(path, run.run_id, AUDIT_SCAN_BYTES)


def governance(snapshots: SnapshotStore, run: RunRecord) -> dict[str, Any] | None:
    """The governance decision a run was admitted under, with the reasons from its policy snapshot
    when that is kept and readable (else the run record's own reasons); None without a decision."""
    verdict = run.provenance.governance_decision
    if verdict is None:
        return None
    reasons = [{"code": "", "message": r} for r in verdict.reasons]
    ref = run.provenance.policy_snapshot_ref
    if ref:
        with contextlib.suppress(SnapshotError):
            snapshot = snapshots.load_policy(run.tenant_id, run.worker_id, ref)
            reasons = [{"code": r.code, "message": r.message} for r in snapshot.decision.reasons]
    return {
        "action": verdict.action,
        "posture": verdict.posture,
        "risk_tier": verdict.risk_tier,
        "reasons": reasons,
        "policy_ref": ref,
    }


def engine_state(run: RunRecord) -> dict[str, Any]:
    """A planning run's plan (node states) or a LangGraph run's graph thread, as the run view shows them."""
    shown: dict[str, Any] = {}
    if run.plan is not None:
        p = run.plan
        nodes = [
            {"id": n.id, "state": n.state, "depends_on": list(n.depends_on), "revision": n.revision, "error": n.error}
            for n in p.nodes
        ]
        shown["plan"] = {"status": p.status, "revision": p.revision, "replans": p.replans, "nodes": nodes}
    if run.graph is not None:
        g = run.graph
        shown["graph"] = {"thread": g.thread, "status": g.status, "steps": list(g.steps), "interrupt": g.interrupt}
    return shown


def trace_view(trace: RunTraceFile | None, problem: str | None = None) -> dict[str, Any]:
    """The run's context and AG-UI timeline from its trace; a run without one (it ran before traces
    were kept, or was never routed) says so, as does an unreadable trace."""
    if trace is None:
        why = problem or "this run kept no trace (it ran before traces were kept)"
        return {
            "context": {"recorded": False, "reason": why, "segments": []},
            "timeline": {"recorded": False, "reason": why, "events": [], "dropped": 0},
        }
    events = [e.model_dump() for e in trace.events]
    timeline = {
        "recorded": True,
        "started_at": trace.started_at.isoformat(),
        "events": events,
        "dropped": trace.dropped,
    }
    if trace.context is None:
        why = "no context was assembled: the run ended before an engine started (gated, refused, duplicate, relayed)"
        return {"context": {"recorded": False, "reason": why, "segments": []}, "timeline": timeline}
    return {"context": {"recorded": True, **trace.context.model_dump()}, "timeline": timeline}


def _trace(root: Path, run: RunRecord) -> dict[str, Any]:
    try:
        return trace_view(read_run_trace(root, run.tenant_id, run.worker_id, run.run_id))
    except (RunTraceError, OSError) as exc:
        return trace_view(None, f"the run's trace could not be read: {exc}")


def _provenance(run: RunRecord) -> dict[str, Any]:
    p = asdict(run.provenance)
    p.pop("governance_decision", None)
    if run.provenance.scheduled_for is not None:
        p["scheduled_for"] = run.provenance.scheduled_for.isoformat()
    return {k: list(v) if isinstance(v, tuple) else v for k, v in p.items() if v not in (None, "", (), 0)}


def _tool_calls(run: RunRecord, audit: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    calls = []
    for call in run.tool_calls:
        record = audit.get(call.call_id, {})
        calls.append(
            {
                "call_id": call.call_id,
                "name": call.name,
                "outcome": str(call.outcome),
                "code": call.code,
                "duration_ms": round(call.duration_ms, 1),
                "effect": record.get("effect"),
                "risk_level": record.get("risk_level"),
                "decision": record.get("decision"),
                "approved": record.get("approved", False),
                "is_error": record.get("is_error", False),
                "args": record.get("args"),
                "detail": record.get("detail") or None,
                "audited": bool(record),
            }
        )
    return calls


def model_calls(run: RunRecord) -> list[ModelUsage]:
    """The run's model calls, its goal evaluation's included."""
    calls = list(run.model_usage)
    if run.goal_verdict is not None and run.goal_verdict.usage is not None:
        calls.append(run.goal_verdict.usage)
    return calls


def _model_calls(run: RunRecord) -> list[dict[str, Any]]:
    return [
        {
            "purpose": u.purpose,
            "tier": u.tier,
            "group": u.group,
            "model": u.model,
            "latency_ms": round(u.latency_ms, 1),
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "cost_usd": u.cost_usd,
            "error": u.error,
        }
        for u in model_calls(run)
    ]


def _timings(run: RunRecord) -> dict[str, Any]:
    t = run.timings
    return {
        "queued_at": t.queued_at.isoformat(),
        "started_at": t.started_at.isoformat() if t.started_at else None,
        "finished_at": t.finished_at.isoformat() if t.finished_at else None,
        "queue_ms": t.queue_ms,
        "run_ms": t.run_ms,
        "total_ms": t.total_ms,
    }


def _view(run: RunRecord, governance: dict[str, Any] | None, audit: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    model_calls = _model_calls(run)
    costs = [c["cost_usd"] for c in model_calls if c["cost_usd"] is not None]
    verdict = run.goal_verdict
    return {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "worker_id": run.worker_id,
        "thread_id": run.thread_id,
        "state": run.state.value,
        "reason": failure_reason(run),
        "error": asdict(run.error) if run.error else None,
        "goal_status": run.goal_status.value,
        "goal_verdict": None
        if verdict is None
        else {
            "status": verdict.status.value,
            "goal_id": verdict.goal_id,
            "task_id": verdict.task_id,
            "reasons": list(verdict.reasons),
            "evidence": list(verdict.evidence),
        },
        "skill_id": run.skill_id,
        "engine": run.engine,
        "fallback": asdict(run.fallback) if run.fallback else None,
        **engine_state(run),  # a planning run's plan, a LangGraph run's thread
        "timings": _timings(run),
        "provenance": _provenance(run),
        "governance": governance,
        "pending_approval": {"tool": run.pending_approval.tool, "reason": run.pending_approval.reason}
        if run.pending_approval
        else None,
        "model_calls": model_calls,
        "totals": {
            "model_calls": len(model_calls),
            "prompt_tokens": sum(c["prompt_tokens"] for c in model_calls),
            "completion_tokens": sum(c["completion_tokens"] for c in model_calls),
            "latency_ms": round(sum(c["latency_ms"] for c in model_calls), 1),
            "cost_usd": round(sum(costs), 6) if costs else None,
        },
        "tool_calls": _tool_calls(run, audit),
        "deliverables": [
            {"kind": d.kind, "title": d.title, "ref": d.ref, "content": d.content[:DELIVERABLE_CHARS]}
            for d in run.deliverables
        ],
        "checks": [asdict(c) for c in run.checks],
        "deliveries": [asdict(d) for d in run.deliveries],
        "escalations": [asdict(e) for e in run.escalations],
        "children": [{"worker_id": c.worker_id, "run_id": c.run_id} for c in run.children],
        "history": [
            {"at": c.at.isoformat(), "from": c.source.value if c.source else None, "to": c.target.value, "note": c.note}
            for c in run.history
        ],
    }


async def run_detail(runtime: Runtime, run: RunRecord) -> dict[str, Any]:
    """The run view of a run already read for the caller's tenant and worker."""
    root = runtime.registry.root

    def read() -> dict[str, Any]:
        view = _view(run, governance(SnapshotStore(root), run), tool_audit(root, run))
        view.update(_trace(root, run))  # context and timeline
        try:  # the supervisor's decisions and comments, kept beside the run (docs/supervisor.md)
            view["supervision"] = run_record(root, run.tenant_id, run.worker_id, run.run_id)
        except (PolicyError, OSError, ValueError) as exc:
            view["supervision"] = {"error": str(exc)}
        return view

    shown: dict[str, Any] = json.loads(json.dumps(await asyncio.to_thread(read), default=str))
    return shown
