"""The learned policy over the Policy Gate (the governance stage's `learned`).

For autonomous work the table let through (interactive work is never touched):

- a learned `confirm` of one of the task's actions turns a decision that would run (`auto`, `brief`)
  into `confirm` (gated; a person's confirmation, as any gated task);
- a learned `auto` of all its actions lifts a `confirm` whose only reason is the high-risk rule (rule 4
  of docs/policy-gate.md) to `brief`: it runs, is reported in the brief, and its external calls are
  held in the undo window when the action has one. An irreversible action, one in
  `always_require_confirmation`, or a gate for any other reason is never lifted.

Either way the decision names the version (`learned:policy/vN` in `policy_sources`, a `learned_*`
gate reason). Every such decision goes to the decision log with the live version and what each
version in shadow would have decided.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from genworker.autonomy.learning.learner import Learner
from genworker.autonomy.learning.models import LearnedGate, LearningState
from genworker.worker.governance.decision_table import Facts
from genworker.worker.governance.models import GovernanceDecision, GovernanceInput, Reason
from genworker.worker.governance.policy_gate import Policy, resolve_policy

__all__ = ["LearnedGateOverlay", "learned_decision"]

_LIFTABLE = frozenset({"high_risk_needs_confirmation"})


def actions_of(facts: Facts) -> tuple[str, ...]:
    """The names the gate judged (governance/policy_gate.py `gate_decision`)."""
    return facts.actions or (f"{facts.source_type}_task",)


def learned_decision(
    rules: dict[str, LearnedGate],
    version: int,
    policy: Policy,
    actions: tuple[str, ...],
    table: GovernanceDecision,
    decision: GovernanceDecision,
) -> GovernanceDecision:
    """`decision` under the learned `rules` of policy `version`."""
    if table.action != "auto" or decision.gate_result is None:
        return decision  # blocked or gated by the table: nothing learned overrides that
    source = f"learned:policy/v{version}"
    confirm = [a for a in actions if rules.get(a) == "confirm"]
    if confirm and decision.gate_result in ("auto", "brief"):
        why = f"learned policy v{version}: {', '.join(confirm)} needs a person's confirmation (learned from feedback)"
        reason = Reason("learned_confirm", why)
        return replace(
            decision,
            action="gated",
            posture="proposal_only",
            gate_result="confirm",
            gate_reasons=(reason,),
            undo_window_s=None,
            reasons=(*decision.reasons, reason),
            policy_sources=(*decision.policy_sources, source),
        )
    lift = actions and all(rules.get(a) == "auto" for a in actions)
    if not lift or decision.gate_result != "confirm" or {r.code for r in decision.gate_reasons} - _LIFTABLE:
        return decision
    if table.reversibility == "irreversible" or any(
        a in policy.irreversible_actions or a in policy.always_require_confirmation for a in actions
    ):
        return decision  # never_override_irreversible_rules
    why = f"learned policy v{version}: {', '.join(actions)} approved often enough to run without asking; in the brief"
    window = policy.undo_window_seconds if table.reversibility == "undo_window" else None
    return replace(
        table,
        gate_result="brief",
        gate_reasons=(Reason("learned_auto", why),),
        undo_window_s=window,
        policy_sources=(*table.policy_sources, source),
    )


class LearnedGateOverlay:
    """TaskGovernanceStage.learned over a Learner."""

    def __init__(self, learner: Learner, runs_here: Callable[[str, str], bool] | None = None) -> None:
        self.learner = learner
        self.runs_here = runs_here  # ticks (proposals) only where the worker's autonomy runs

    def _state(self, inp: GovernanceInput, facts: Facts) -> LearningState | None:
        if facts.interactive or not self.learner.config_of(inp.tenant.tenant_id).enabled:
            return None
        return self.learner.store.state(inp.tenant.tenant_id, inp.worker.worker_id)

    def adjust(
        self, inp: GovernanceInput, facts: Facts, table: GovernanceDecision, decision: GovernanceDecision
    ) -> GovernanceDecision:
        state = self._state(inp, facts)
        if state is None or not state.active:
            return decision
        policy = resolve_policy(inp.tenant.policy, inp.worker.persona.policy)
        return learned_decision(state.rules(), state.decides("gate"), policy, actions_of(facts), table, decision)

    def record(
        self, inp: GovernanceInput, facts: Facts, table: GovernanceDecision, decision: GovernanceDecision, ref: str
    ) -> None:
        state = self._state(inp, facts)
        if state is None or decision.gate_result is None:
            return
        t, w = inp.tenant.tenant_id, inp.worker.worker_id
        policy = resolve_policy(inp.tenant.policy, inp.worker.persona.policy)
        actions = actions_of(facts)
        shadow = []
        for version in (v for v in state.shadows if v.kind == "gate"):
            would = learned_decision(state.rules(version), version.version, policy, actions, table, decision)
            shadow.append({"version": version.version, "would_have": would.gate_result})
        learned = any(s.startswith("learned:policy/") for s in decision.policy_sources)
        self.learner.log(
            t, w, "gate", decision_id=ref, actions=list(actions), source_type=inp.source_type, duty_id=inp.duty_id,
            gate_result=decision.gate_result, policy_version=state.decides("gate"), learned=learned, shadow=shadow,
            reasons=[r.code for r in decision.gate_reasons],
        )  # fmt: skip
        if self.runs_here is None or self.runs_here(t, w):
            self.learner.tick(t, w)
