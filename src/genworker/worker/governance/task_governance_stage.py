"""TaskGovernanceStage: the router's step before skill matching.

It binds the task to a duty, snapshots the duty contract, runs the decision table and the
Policy Gate (which may turn auto into gated: `confirm`), applies the worker's learned policy when one
is attached (`learned`, autonomy/learning: it may tighten or, never for an irreversible action, lift
the gate), lets an approval lift a gate, writes the policy snapshot, and returns the manifest fields and the
decision. `evaluate` does blocking file I/O; `evaluate_async` runs it in a worker thread.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Protocol

from genworker.worker.governance.approval_resolver import ApprovalResolver
from genworker.worker.governance.decision_table import TABLE_VERSION, Facts, apply_approval, decide
from genworker.worker.governance.duty_binding import DutyBinding, DutyBindingResolver
from genworker.worker.governance.models import (
    GovernanceDecision,
    GovernanceInput,
    GovernanceOutcome,
    ManifestFields,
    Reason,
)
from genworker.worker.governance.policy_gate import PolicyGate, gate_decision
from genworker.worker.governance.snapshots import (
    ContractSnapshot,
    PolicyDecisionRecord,
    PolicyInputs,
    PolicySnapshot,
    ReasonRecord,
    SnapshotStore,
)
from genworker.workspace.models import DutySpec
from genworker.write_journal import DIRECT, DurableFiles

__all__ = ["TABLE_SOURCE", "LearnedPolicy", "TaskGovernanceStage"]

TABLE_SOURCE = f"genworker:task_governance_table/v{TABLE_VERSION}"
_DEFAULTS_FILE = "_defaults.md"


class LearnedPolicy(Protocol):
    """The worker's learned policy over the gate (autonomy/learning)."""

    def adjust(
        self, inp: GovernanceInput, facts: Facts, table: GovernanceDecision, decision: GovernanceDecision
    ) -> GovernanceDecision:
        """The decision as the learned policy makes it (`table`: before the Policy Gate)."""
        ...

    def record(
        self, inp: GovernanceInput, facts: Facts, table: GovernanceDecision, decision: GovernanceDecision, ref: str
    ) -> None:
        """Log the decision (its policy snapshot `ref`) with what versions in shadow would have decided."""
        ...


class TaskGovernanceStage:
    def __init__(
        self,
        workspace_root: Path,
        *,
        approvals: ApprovalResolver | None = None,
        bindings: DutyBindingResolver | None = None,
        files: DurableFiles = DIRECT,
    ) -> None:
        self._root = workspace_root
        self.snapshots = SnapshotStore(workspace_root, files)
        self._approvals = approvals or ApprovalResolver()
        self._bindings = bindings or DutyBindingResolver()
        self.gate = PolicyGate()
        self.learned: LearnedPolicy | None = None

    async def evaluate_async(self, inp: GovernanceInput) -> GovernanceOutcome:
        # on the event loop when snapshot writes are journaled (no fsync there), else in a worker thread
        return await self.snapshots.files.run(lambda: self.evaluate(inp))

    def evaluate(self, inp: GovernanceInput) -> GovernanceOutcome:
        binding = self._bindings.resolve(inp)
        facts = Facts.gather(inp, binding)
        contract_ref = self._save_contract(inp, binding.duty)
        table = replace(decide(facts), policy_sources=self._sources(inp, binding))
        decision = gate_decision(self.gate, inp, facts, table)
        if self.learned is not None:
            decision = self.learned.adjust(inp, facts, table, decision)
        inputs = _inputs(facts, inp, contract_ref)
        gate_ref = None
        if decision.action == "gated":  # the policy a confirmation approves; an approval must name it
            _, gate_ref = self.snapshots.save_policy(_snapshot(inp, inputs, decision))
        approved = False
        if inp.approval_ref is not None:
            decision, inputs, approved = self._consider_approval(inp, inp.approval_ref, decision, inputs, gate_ref)
        snapshot_path, ref = self.snapshots.save_policy(_snapshot(inp, inputs, decision))
        if self.learned is not None:
            self.learned.record(inp, facts, table, decision, snapshot_path)
        duty = binding.duty
        step = duty.process_step if duty is not None else None
        duty_preferred = duty.preferred_skill_ids if duty is not None else ()
        goal_preferred = binding.goal.preferred_skill_ids if binding.goal is not None else ()
        manifest = ManifestFields(
            source_type=inp.source_type,
            source_id=inp.source_id,
            policy_snapshot_ref=snapshot_path,
            policy_ref=ref,
            risk_tier=decision.risk_tier,
            goal_id=inp.goal_id,
            duty_id=binding.duty_id,
            trigger_id=binding.trigger_id,
            execution_depth=binding.depth,
            duty_posture=binding.posture,
            process_id=step.process_id if step is not None else None,
            step_id=step.step_id if step is not None else None,
            contract_version=inputs.contract_version,
            contract_snapshot_ref=contract_ref,
            approval_ref=inp.approval_ref if approved else None,
            skill_id=inp.skill_id,
            skill_hint=(duty.skill_id or duty.skill_hint) if duty is not None else None,
            preferred_skill_ids=tuple(dict.fromkeys((*inp.preferred_skill_ids, *duty_preferred, *goal_preferred))),
        )
        return GovernanceOutcome(manifest, decision, duty, gate_ref)

    def _consider_approval(
        self,
        inp: GovernanceInput,
        ref: str,
        decision: GovernanceDecision,
        inputs: PolicyInputs,
        gate_ref: str | None,
    ) -> tuple[GovernanceDecision, PolicyInputs, bool]:
        inputs = inputs.model_copy(update={"approval_ref": ref, "gated_policy_ref": gate_ref})
        if gate_ref is None:
            reason = Reason("approval_unused", f"approval {ref!r} is not needed: the decision is {decision.action}")
            return apply_approval(decision, False, reason), inputs, False
        check = self._approvals.check(inp.tenant.tenant_id, inp.worker.worker_id, ref, policy_ref=gate_ref)
        decision = apply_approval(decision, check.granted, check.reason)
        if check.granted:
            decision = replace(decision, policy_sources=(*decision.policy_sources, f"approval:{ref}"))
        return decision, inputs, check.granted

    def _save_contract(self, inp: GovernanceInput, duty: DutySpec | None) -> str | None:
        if duty is None or duty.contract is None:
            return None
        step = duty.process_step
        snapshot = ContractSnapshot(
            tenant_id=inp.worker.tenant_id,
            worker_id=inp.worker.worker_id,
            duty_id=duty.duty_id,
            duty_file=inp.worker.files.get(f"duty:{duty.duty_id}"),
            contract_version=duty.contract.version,
            contract=duty.contract.model_dump(mode="json"),
            process_step=step.model_dump(mode="json") if step is not None else None,
        )
        return self.snapshots.save_contract(snapshot)

    def _sources(self, inp: GovernanceInput, binding: DutyBinding) -> tuple[str, ...]:
        """The files (and the table) the decision was made from, workspace-relative."""
        files = inp.worker.files
        sources = [f"tenants/{inp.tenant.tenant_id}/TENANT.json", files.get("persona")]
        if binding.goal is not None:
            sources.append(files.get(f"goal:{binding.goal.goal_id}"))
        if binding.duty is not None:
            duty_file = files.get(f"duty:{binding.duty.duty_id}")
            sources.append(duty_file)
            if duty_file is not None:
                defaults = (PurePosixPath(duty_file).parent / _DEFAULTS_FILE).as_posix()
                sources.append(defaults if (self._root / defaults).is_file() else None)
        sources.append(TABLE_SOURCE)
        return tuple(s for s in sources if s)


def _inputs(facts: Facts, inp: GovernanceInput, contract_ref: str | None) -> PolicyInputs:
    binding, duty = facts.binding, facts.duty
    return PolicyInputs(
        trust_level=facts.trust_level,
        source_type=facts.source_type,
        source_class="autonomous" if facts.autonomous else "interactive",
        goal_id=inp.goal_id,
        goal_status=facts.goal_status,
        duty_id=binding.duty_id if duty is not None else inp.duty_id,
        duty_status=facts.duty_status,
        bound_via=binding.via,
        binding_problem=binding.problem,
        trigger_id=binding.trigger_id,
        execution_depth=binding.depth,
        duty_posture=binding.posture,
        contract_version=duty.contract.version if duty is not None and duty.contract is not None else None,
        contract_snapshot_ref=contract_ref,
        requested_effects=tuple(sorted(e.value for e in facts.effects)) if facts.effects is not None else None,
        requested_actions=facts.actions,
        sensor_id=facts.sensor_id,
        sensor_requires_approval=facts.sensor_requires_approval,
        confidence=inp.confidence,
        evidence_sources=inp.evidence_sources,
    )


def _snapshot(inp: GovernanceInput, inputs: PolicyInputs, decision: GovernanceDecision) -> PolicySnapshot:
    record = PolicyDecisionRecord(
        action=decision.action,
        posture=decision.posture,
        risk_tier=decision.risk_tier,
        reversibility=decision.reversibility,
        reasons=tuple(ReasonRecord(code=r.code, message=r.message) for r in decision.reasons),
        policy_sources=decision.policy_sources,
        gate_result=decision.gate_result,
        gate_reasons=tuple(ReasonRecord(code=r.code, message=r.message) for r in decision.gate_reasons),
        undo_window_s=decision.undo_window_s,
    )
    return PolicySnapshot(
        table_version=TABLE_VERSION,
        tenant_id=inp.worker.tenant_id,
        worker_id=inp.worker.worker_id,
        inputs=inputs,
        decision=record,
    )
