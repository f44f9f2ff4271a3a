"""The Policy Gate (Steward): one planned action in, `auto | brief | confirm | blocked` out.

The gate runs inside governance after the decision table. Rules, first match wins:

1. the table blocked the task -> blocked; the table gated it -> confirm;
2. irreversible (declared, or an action named in `irreversible_actions`) -> confirm, always: no
   setting reaches this rule (the policy model rejects turning it off, and the lists only grow);
3. an action named in `always_require_confirmation` -> confirm;
4. high risk runs without asking only when every one of: the tenant enabled high-risk auto,
   confidence >= threshold (0.92), >= 2 independent sources agree, the action is whitelisted (or
   authorised by an `auto:` entry of the bound duty's contract), and it is reversible or has a
   working undo inside the undo window (60 s). Otherwise -> confirm, naming each unmet condition.
   When the undo window was the condition, the decision carries `undo_window_s`: the router
   then holds the run's external and delegate tool calls that long (tools/middlewares/undo_window.py);
5. low risk and reversible -> auto; anything else that may run -> brief (it runs and is reported
   in the next brief).

Policy values: Steward's defaults, then the tenant's `policy:` block, then the worker's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from genworker.worker.governance.decision_table import Facts
from genworker.worker.governance.models import (
    GateResult,
    GovernanceDecision,
    GovernanceInput,
    Reason,
    Reversibility,
    RiskTier,
)
from genworker.workspace.models.policy import PolicyOverrides, QuietHours, WaitingTimeoutAction

__all__ = [
    "DEFAULT_POLICY",
    "GateResult",
    "GateVerdict",
    "PlannedAction",
    "Policy",
    "PolicyGate",
    "Priority",
    "gate_decision",
    "resolve_policy",
]

Priority = Literal["P0", "P1", "P2", "P3"]


@dataclass(frozen=True, slots=True)
class Policy:
    """The effective policy of one worker."""

    interruption_budget_per_day: int = 10
    brief_window_hours: float = 4.0
    waiting_default_timeout_hours: float = 24.0
    waiting_timeout_action: WaitingTimeoutAction = "remind_then_escalate"
    quiet_hours: QuietHours = field(default_factory=QuietHours)
    high_risk_auto_enabled: bool = False  # the issue: only when the tenant enables it
    high_risk_confidence_threshold: float = 0.92
    require_multi_source_count: int = 2
    undo_window_seconds: int = 60
    high_risk_whitelist: tuple[str, ...] = ("internal_status_transition", "schedule_internal_meeting")
    irreversible_actions: tuple[str, ...] = (
        "external_commitment_send",
        "payment_or_contract_change",
        "delete_external_record",
    )
    always_require_confirmation: tuple[str, ...] = ("external_commitment_send", "payment_or_contract_change")

    def merged(self, overrides: PolicyOverrides) -> Policy:
        values = {
            name: getattr(overrides, name)
            for name in (
                "interruption_budget_per_day",
                "brief_window_hours",
                "waiting_default_timeout_hours",
                "waiting_timeout_action",
                "quiet_hours",
                "high_risk_auto_enabled",
                "high_risk_confidence_threshold",
                "require_multi_source_count",
                "undo_window_seconds",
                "high_risk_whitelist",
            )
            if getattr(overrides, name) is not None
        }
        return replace(
            self,
            **values,
            irreversible_actions=_union(self.irreversible_actions, overrides.irreversible_actions),
            always_require_confirmation=_union(self.always_require_confirmation, overrides.always_require_confirmation),
        )

    def as_dict(self) -> dict[str, object]:
        data = _fields(self)
        data["quiet_hours"] = self.quiet_hours.model_dump(mode="json")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}


def _fields(policy: Policy) -> dict[str, object]:
    return {name: getattr(policy, name) for name in Policy.__dataclass_fields__}


def _union(base: tuple[str, ...], extra: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*base, *extra)))


DEFAULT_POLICY = Policy()


def resolve_policy(tenant_policy: PolicyOverrides, worker_policy: PolicyOverrides | None = None) -> Policy:
    policy = DEFAULT_POLICY.merged(tenant_policy)
    return policy.merged(worker_policy) if worker_policy is not None else policy


@dataclass(frozen=True, slots=True)
class PlannedAction:
    """What the gate judges. `sources` are the independent signals behind an inferred action."""

    action_type: str
    risk: RiskTier
    reversibility: Reversibility
    confidence: float | None = None
    sources: tuple[str, ...] = ()
    undo_available: bool = False  # a working undo exists (e.g. the undo window of a deferred send)
    contract_authorised: bool = False  # an `auto:` entry of the bound duty's contract covers it
    priority: Priority = "P2"


@dataclass(frozen=True, slots=True)
class GateVerdict:
    result: GateResult
    reasons: tuple[Reason, ...]
    reversibility: Reversibility
    undo_window_s: int | None = None  # it may run only with its external calls held this long

    @property
    def runs(self) -> bool:
        return self.result in ("auto", "brief")

    def as_dict(self) -> dict[str, object]:
        return {
            "result": self.result,
            "reversibility": self.reversibility,
            "reasons": [{"code": r.code, "message": r.message} for r in self.reasons],
        }


class PolicyGate:
    def evaluate(self, action: PlannedAction, policy: Policy, *, table_action: str = "auto") -> GateVerdict:
        reversibility = action.reversibility
        if action.action_type in policy.irreversible_actions:
            reversibility = "irreversible"
        if table_action == "blocked":
            return GateVerdict(
                "blocked", (Reason("gate_blocked", "the decision table blocked this task"),), reversibility
            )
        if table_action == "gated":
            return GateVerdict(
                "confirm", (Reason("gate_confirm", "the decision table requires a confirmation"),), reversibility
            )
        if reversibility == "irreversible":
            why = f"{action.action_type!r} is irreversible: a person must confirm it; no setting changes this"
            return GateVerdict("confirm", (Reason("irreversible_needs_confirmation", why),), reversibility)
        if action.action_type in policy.always_require_confirmation:
            why = f"{action.action_type!r} is listed in always_require_confirmation"
            return GateVerdict("confirm", (Reason("always_confirm", why),), reversibility)
        if action.risk == "high":
            unmet = _high_risk_unmet(action, policy, reversibility)
            if unmet:
                why = "high risk auto needs " + "; ".join(unmet)
                return GateVerdict("confirm", (Reason("high_risk_needs_confirmation", why),), reversibility)
            if reversibility == "undo_window" and not action.contract_authorised:
                window = policy.undo_window_seconds
                why = (
                    f"high risk {action.action_type!r} passed every high-risk condition; its external calls "
                    f"are held {window} s and can be undone meanwhile; reported in the brief"
                )
                return GateVerdict("brief", (Reason("high_risk_auto_undo_window", why),), reversibility, window)
            why = f"high risk {action.action_type!r} passed every high-risk condition; reported in the brief"
            return GateVerdict("brief", (Reason("high_risk_auto", why),), reversibility)
        if action.risk == "low" and reversibility == "reversible":
            return GateVerdict("auto", (Reason("low_risk_reversible", "low risk and reversible: runs"),), reversibility)
        why = f"{action.risk} risk, {reversibility}: runs and is reported in the next brief"
        return GateVerdict("brief", (Reason("reported_in_brief", why),), reversibility)


def _high_risk_unmet(action: PlannedAction, policy: Policy, reversibility: Reversibility) -> list[str]:
    if action.contract_authorised:
        # A duty contract's `auto:` entry is the author's standing confirmation of that action.
        return [] if reversibility != "irreversible" else ["a person's confirmation (irreversible)"]
    unmet: list[str] = []
    if not policy.high_risk_auto_enabled:
        unmet.append("the tenant to enable high_risk_auto_enabled")
    if action.confidence is None or action.confidence < policy.high_risk_confidence_threshold:
        unmet.append(f"confidence >= {policy.high_risk_confidence_threshold} (got {action.confidence})")
    independent = len(set(action.sources))
    if independent < policy.require_multi_source_count:
        unmet.append(f">= {policy.require_multi_source_count} independent sources (got {independent})")
    if action.action_type not in policy.high_risk_whitelist:
        unmet.append(f"{action.action_type!r} in high_risk_whitelist")
    if reversibility == "undo_window" and not action.undo_available:
        unmet.append(f"a working undo inside the {policy.undo_window_seconds} s undo window")
    return unmet


_RANK: dict[GateResult, int] = {"auto": 0, "brief": 1, "confirm": 2, "blocked": 3}


def gate_decision(
    gate: PolicyGate, inp: GovernanceInput, facts: Facts, decision: GovernanceDecision
) -> GovernanceDecision:
    """Run the gate over every requested action of a task; the strictest verdict wins. `confirm` on
    work the table let through turns it into `gated`, so it takes the confirmation flow."""
    policy = resolve_policy(inp.tenant.policy, inp.worker.persona.policy)
    names = facts.actions or (f"{facts.source_type}_task",)
    verdicts = [_verdict(gate, inp, facts, decision, policy, name) for name in names]
    verdict = max(verdicts, key=lambda v: _RANK[v.result])
    reasons = tuple(dict.fromkeys(r for v in verdicts if v.result == verdict.result for r in v.reasons))
    held = [v.undo_window_s for v in verdicts if v.undo_window_s is not None]
    window = max(held) if held and verdict.runs else None
    decision = replace(decision, gate_result=verdict.result, gate_reasons=reasons, undo_window_s=window)
    if verdict.result == "confirm" and decision.action == "auto":
        return replace(
            decision,
            action="gated",
            posture="proposal_only",
            risk_tier="high" if verdict.reversibility == "irreversible" else decision.risk_tier,
            reversibility=verdict.reversibility,
            reasons=(*decision.reasons, *reasons),
        )
    return decision


def _verdict(
    gate: PolicyGate,
    inp: GovernanceInput,
    facts: Facts,
    decision: GovernanceDecision,
    policy: Policy,
    name: str,
) -> GateVerdict:
    if decision.action == "auto" and decision.posture in ("degraded", "proposal_only"):
        why = f"posture {decision.posture}: the run only reads and prepares proposals"
        return GateVerdict("auto", (Reason("gate_read_only", why),), "reversible")
    if facts.interactive and decision.action == "auto":
        # The person asking is present; tool calls that need approval still ask one by one. Only
        # actions the policy names as irreversible or always-confirm are gated as a whole.
        named = PlannedAction(name, "low", "reversible")
        verdict = gate.evaluate(named, policy)
        if verdict.result == "confirm":
            return verdict
        why = "asked for by the person in the conversation"
        return GateVerdict("auto", (Reason("requester_present", why),), decision.reversibility)
    planned = PlannedAction(
        action_type=name,
        risk=decision.risk_tier,
        reversibility=decision.reversibility,
        confidence=inp.confidence,
        sources=inp.evidence_sources,
        undo_available=inp.undo_available,
        contract_authorised=facts.contract_authorises(),
    )
    return gate.evaluate(planned, policy, table_action=decision.action)
