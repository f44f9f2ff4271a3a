"""Admission: whether an accepted request may run, as one tagged outcome.

`Admitter.admit` runs the governance stage (manifest, snapshots, auto | gated | blocked), matches
the skill of an auto task before its run is recorded (so the record names the skill that runs),
writes the task's manifest and run record, and says what happens next:

- `Admitted`: auto, with a skill: the run is started and goes on to preparation and the engine;
- `Blocked`: refused by policy (`governance_blocked`) or no skill fits (`no_skill`);
- `Gated`: a person must confirm the task first;
- `Duplicate`: the idempotency key already made a run, which is never run twice.

Every outcome but `Admitted` ends the run without an engine (settlement.py records how). The
writes are not yet durable when `admit` returns: the caller's `DurableFiles.pending` block decides
when to wait for them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from genworker.observability.logging import log_decision
from genworker.observability.metrics import record_gate_result
from genworker.worker.governance import GovernanceDecision, GovernanceInput, GovernanceOutcome, TaskGovernanceStage
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.routing import RouteAccepted, RouteRequest
from genworker.worker.skill_matcher import SkillMatch, SkillMatcher, UnknownSkillError
from genworker.worker.task import GovernanceVerdict, RunRecord, TaskManifest, TaskProvenance
from genworker.workspace.models.depth import DEFAULT_DEPTH
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Skill, Worker

__all__ = ["Admission", "Admitted", "Admitter", "Blocked", "Duplicate", "Gated"]

log = logging.getLogger("genworker.router")


@dataclass(frozen=True, slots=True)
class Admitted:
    outcome: GovernanceOutcome
    skill: Skill
    manifest: TaskManifest


@dataclass(frozen=True, slots=True)
class Blocked:
    code: str  # governance_blocked | no_skill (and pre_script_failed, from preparation)
    message: str


@dataclass(frozen=True, slots=True)
class Gated:
    outcome: GovernanceOutcome
    manifest: TaskManifest


@dataclass(frozen=True, slots=True)
class Duplicate:
    record: RunRecord  # the run the key made first


Admission = Admitted | Blocked | Gated | Duplicate


@dataclass(frozen=True, slots=True)
class Admitter:
    registry: WorkspaceRegistry
    governance: TaskGovernanceStage
    matcher: SkillMatcher
    tasks: TaskLifecycle

    async def admit(self, req: RouteRequest, worker: Worker, ids: RouteAccepted) -> Admission:
        """Governance, the skill, and the task's manifest and run record written (not yet durable)."""
        outcome = await self.governance.evaluate_async(self._input(req, worker))
        decision = outcome.decision
        match = self._match_skill(worker, req, outcome) if decision.action == "auto" else None
        skill_id = match.skill_id if isinstance(match, SkillMatch) else req.skill_id
        manifest = _manifest(req, outcome, ids, skill_id)
        _record_decision(decision, req, ids.run_id)
        persisted = await self.tasks.persist_initial(manifest, start=decision.action != "blocked")
        if persisted.run_id != ids.run_id:
            return Duplicate(persisted)
        if decision.action == "blocked":
            message = "; ".join(r.message for r in decision.reasons if r.code != "default") or "blocked by policy"
            return Blocked("governance_blocked", message)
        if decision.action == "gated":
            return Gated(outcome, manifest)
        assert match is not None  # the decision is auto
        if isinstance(match, str):
            return Blocked("no_skill", match)
        assert match.skill is not None
        return Admitted(outcome, match.skill, manifest)

    def _input(self, req: RouteRequest, worker: Worker) -> GovernanceInput:
        state = self.registry.tenant(req.tenant_id)
        assert state is not None
        return GovernanceInput(
            state.tenant,
            worker,
            req.text,
            req.source_type,
            req.source_id,
            req.duty_id,
            req.trigger_id,
            req.goal_id,
            req.skill_id,
            preferred_skill_ids=req.preferred_skill_ids,
            approval_ref=req.approval_ref,
            requested_actions=req.evidence.actions,
            requested_effects=req.evidence.effects,
            confidence=req.evidence.confidence,
            evidence_sources=req.evidence.sources,
            undo_available=True,  # tools/environment.py holds the external calls of a run given undo_window_s
        )

    def _match_skill(self, worker: Worker, req: RouteRequest, outcome: GovernanceOutcome) -> SkillMatch | str:
        """The skill for this task, or why there is none."""
        try:
            match = self.matcher.match(
                worker,
                req.text,
                skill_id=req.skill_id,
                duty_skill_hint=outcome.manifest.skill_hint,
                preferred_skill_ids=outcome.manifest.preferred_skill_ids,
            )
        except UnknownSkillError as exc:
            return str(exc)
        return match if match.skill is not None else f"worker {worker.worker_id!r} has no skill for this request"


def _manifest(req: RouteRequest, outcome: GovernanceOutcome, ids: RouteAccepted, skill_id: str | None) -> TaskManifest:
    m, d = outcome.manifest, outcome.decision
    verdict = GovernanceVerdict(d.action, d.posture, d.risk_tier, tuple(str(r) for r in d.reasons))
    provenance = TaskProvenance(
        source_type=m.source_type,
        source_id=m.source_id,
        goal_id=m.goal_id,
        duty_id=m.duty_id,
        trigger_id=m.trigger_id,
        execution_depth=m.execution_depth or DEFAULT_DEPTH,
        process_id=m.process_id,
        step_id=m.step_id,
        contract_version=m.contract_version,
        contract_snapshot_ref=m.contract_snapshot_ref,
        policy_snapshot_ref=m.policy_snapshot_ref,
        governance_decision=verdict,
        approval_ref=m.approval_ref,
        scheduled_for=req.scheduled_for,
        idempotency_key=req.idempotency_key,
        parent_run_id=req.parent.run_id if req.parent is not None else None,
        parent_worker_id=req.parent.worker_id if req.parent is not None else None,
        delegation_depth=req.delegation_depth if req.parent is not None else 0,
    )
    return TaskManifest(
        task_id=ids.task_id,
        run_id=ids.run_id,
        tenant_id=req.tenant_id,
        worker_id=req.worker_id,
        text=req.text,
        created_at=datetime.now(UTC),
        thread_id=ids.thread_id,
        skill_id=skill_id,  # the caller's, or the one the matcher chose
        preferred_skill_ids=tuple(m.preferred_skill_ids),
        provenance=provenance,
        gate_level="gated" if d.action == "gated" else "auto",
    )


def _record_decision(decision: GovernanceDecision, req: RouteRequest, run_id: str) -> None:
    """One metric and one log line per governance decision (the gate result, when the gate ran)."""
    if decision.gate_result is not None:
        record_gate_result(decision.gate_result)
    reasons = [str(r) for r in (*decision.reasons, *decision.gate_reasons)]
    log_decision(
        log, "governance", decision.action, gate=decision.gate_result, reasons=reasons,
        tenant_id=req.tenant_id, worker_id=req.worker_id, run_id=run_id, source_type=req.source_type,
    )  # fmt: skip
