"""AutonomyCommandBackend: what the IM commands (/confirmations, /approve_confirmation,
/reject_confirmation, /suggestions, /approve_suggestion, /reject_suggestion, /feedback, /status,
/deferred, /undo, /waits, /cancel_wait, /resume_wait, /conflicts, /resolve_conflict, /policy,
/rollback_policy, /unfreeze_learning) do, over the same stores and aggregates the HTTP API uses.

Unknown ids raise LookupError; an already decided confirmation or suggestion, or a wait that can
no longer be cancelled or resumed, raises ValueError.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any, Literal

from genworker.autonomy.conflicts.service import ConflictService
from genworker.autonomy.goals import GoalAggregate, goal_health
from genworker.autonomy.learning import LearningService
from genworker.autonomy.suggestions import FeedbackStore, SuggestionAggregate
from genworker.autonomy.waiting import WaitingPlan, WaitingService
from genworker.worker.confirmations.resolve import resolve
from genworker.worker.router import WorkerRouter
from genworker.workspace.models import GoalStatus

__all__ = ["AutonomyCommandBackend"]

Decision = Literal["approve", "reject"]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class AutonomyCommandBackend:
    def __init__(
        self,
        router: WorkerRouter,
        suggestions: SuggestionAggregate,
        feedback_store: FeedbackStore,
        goals: GoalAggregate,
        *,
        clock: Callable[[], dt.datetime] = _utc_now,
        waiting: WaitingService | None = None,
        conflicts: ConflictService | None = None,
    ) -> None:
        self.router = router
        self.suggestion_aggregate = suggestions
        self.feedback_store = feedback_store
        self.goals = goals
        self.clock = clock
        self.waiting = waiting
        self.conflict_service = conflicts
        self.learning: LearningService | None = None  # set by the composition root

    def confirmations(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        pending = self.router.confirmations.list(tenant_id, worker_id, "pending")
        return [
            {"id": c.confirmation_id, "text": c.text, "created_at": c.created_at, "reasons": list(c.reasons)}
            for c in pending
        ]

    async def decide_confirmation(
        self, tenant_id: str, worker_id: str, confirmation_id: str, decision: Decision, by: str
    ) -> dict[str, Any]:
        resolved = await resolve(self.router, tenant_id, worker_id, confirmation_id, decision, by)
        c = resolved.confirmation
        out: dict[str, Any] = {"id": c.confirmation_id, "status": c.status, "decided_by": c.decided_by}
        if resolved.run is not None:
            out |= {"run_id": resolved.run.run_id, "run_state": str(resolved.run.state), "output": resolved.output}
        return out

    def suggestions(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        pending = self.suggestion_aggregate.store.list(tenant_id, worker_id, "pending")
        return [{"id": s.suggestion_id, "title": s.title, "kind": s.kind, "created_at": s.created_at} for s in pending]

    def decide_suggestion(
        self, tenant_id: str, worker_id: str, suggestion_id: str, decision: Decision, by: str
    ) -> dict[str, Any]:
        s = self.suggestion_aggregate.decide(tenant_id, worker_id, suggestion_id, decision, by)
        return {"id": s.suggestion_id, "status": s.status, "kind": s.kind, "result": s.result}

    def feedback(self, tenant_id: str, worker_id: str, text: str, by: str) -> None:
        self.feedback_store.add(tenant_id, worker_id, text, by)

    async def deferred(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        pending = await self.router.tools.undo.records(tenant_id, worker_id, "pending")
        return [{"id": d.undo_id, "tool": d.tool, "execute_at": d.execute_at.isoformat()} for d in pending]

    async def undo(self, tenant_id: str, worker_id: str, undo_id: str, by: str) -> dict[str, Any]:
        """LookupError for an unknown id, ValueError (UndoTooLate) once it executed or was decided."""
        record = await self.router.tools.undo.undo(tenant_id, worker_id, undo_id, by)
        return {"id": record.undo_id, "state": record.state, "decided_by": record.decided_by}

    async def waits(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        """The worker's plans still waiting, or held (GATED) for a person, oldest first."""
        plans = await self._waiting().store.list(tenant_id, worker_id)
        return [_wait(p) for p in plans if p.state in ("waiting", "gated")]

    async def cancel_wait(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> dict[str, Any]:
        """LookupError (WaitingPlanNotFound) for an unknown id, ValueError once it resumed or ended."""
        return _wait(await self._waiting().cancel(tenant_id, worker_id, plan_id, by))

    async def resume_wait(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> dict[str, Any]:
        """Resume now, as the brief's *Resume now*; the errors of `cancel_wait`."""
        return _wait(await self._waiting().resume_plan(tenant_id, worker_id, plan_id, by))

    async def conflicts(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        """The worker's conflicts waiting for a person, newest first."""
        store = self._conflicts().store
        cases = await asyncio.to_thread(store.cases, tenant_id, status="open", worker_id=worker_id)
        return [{"id": c.conflict_id, "resource_key": c.resource_key, "detail": c.detail} for c in cases]

    async def resolve_conflict(
        self, tenant_id: str, worker_id: str, conflict_id: str, decision: str, by: str
    ) -> dict[str, Any]:
        """LookupError for an unknown case (or another worker's), ValueError once it was settled."""
        if decision not in ("proceed", "drop"):
            raise ValueError(f"decision must be 'proceed' or 'drop', got {decision!r}")
        service = self._conflicts()
        case = await asyncio.to_thread(service.store.case, tenant_id, conflict_id)
        if worker_id not in (case.worker_a_id, case.worker_b_id):
            raise LookupError(f"no conflict {conflict_id!r} for worker {worker_id}")
        settled, waiting = await service.decide(
            tenant_id, conflict_id, "proceed" if decision == "proceed" else "drop", by
        )
        return {"id": settled.conflict_id, "status": settled.status, "decision": settled.decision, "call": waiting}

    async def policy(self, tenant_id: str, worker_id: str) -> dict[str, Any]:
        """The learned policy: the version deciding, versions in shadow, whether learning is frozen."""
        overview = await self._learning().overview(tenant_id, worker_id)
        return {k: overview[k] for k in ("policy_version", "frozen", "rules", "versions")}

    async def rollback_policy(self, tenant_id: str, worker_id: str, by: str) -> dict[str, Any]:
        """The newest applied version rolled back; ValueError when none is applied."""
        version = await self._learning().rollback(tenant_id, worker_id, by)
        return {"version": version.version, "status": version.status, "changes": version.describe()}

    async def unfreeze_learning(self, tenant_id: str, worker_id: str, by: str) -> None:
        await self._learning().unfreeze(tenant_id, worker_id, by)

    def _learning(self) -> LearningService:
        if self.learning is None:
            raise ValueError("learning from feedback is not available on this runtime")
        return self.learning

    def _conflicts(self) -> ConflictService:
        if self.conflict_service is None:
            raise ValueError("the Conflict Arbiter is not available on this runtime")
        return self.conflict_service

    def _waiting(self) -> WaitingService:
        if self.waiting is None:
            raise ValueError("WAITING plans are not available on this runtime")
        return self.waiting

    def status(self, tenant_id: str, worker_id: str) -> dict[str, Any]:
        today = self.clock().date()
        goals = [g for g in self.goals.goals(tenant_id, worker_id) if g.status == GoalStatus.ACTIVE]
        return {
            "worker_id": worker_id,
            "pending_confirmations": len(self.router.confirmations.list(tenant_id, worker_id, "pending")),
            "pending_suggestions": len(self.suggestion_aggregate.store.list(tenant_id, worker_id, "pending")),
            "goals": [
                {"goal_id": g.goal_id, "title": g.title, "health": h.health, "completion": h.completion}
                for g in goals
                for h in [goal_health(g, today)]
            ],
        }


def _wait(plan: WaitingPlan) -> dict[str, Any]:
    return {
        "id": plan.plan_id,
        "match_key": plan.match_key,
        "state": plan.state,
        "expires_at": plan.expires_at.isoformat(),
        "title": plan.title,
    }
