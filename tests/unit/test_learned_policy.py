"""The learned policy over the Policy Gate: a learned `confirm` gates what would run; a learned `auto`
lifts only a confirm the high-risk rule alone asked for, never an irreversible or always-confirm action
nor a task the decision table gated (never_override_irreversible_rules)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from genworker.autonomy.learning import learned_decision
from genworker.worker.governance.models import GovernanceDecision, Reason
from genworker.worker.governance.policy_gate import DEFAULT_POLICY

TABLE = GovernanceDecision("auto", "normal", "high", "undo_window", (Reason("default", "runs"),))
BRIEF = replace(TABLE, gate_result="brief", gate_reasons=(Reason("reported_in_brief", "..."),))
HIGH = replace(
    TABLE, action="gated", posture="proposal_only", gate_result="confirm",
    gate_reasons=(Reason("high_risk_needs_confirmation", "..."),),
)  # fmt: skip


def test_a_learned_confirm_gates_what_would_run() -> None:
    got = learned_decision({"label": "confirm"}, 3, DEFAULT_POLICY, ("label",), TABLE, BRIEF)
    assert (got.action, got.gate_result, [r.code for r in got.gate_reasons]) == (
        "gated",
        "confirm",
        ["learned_confirm"],
    )
    assert "learned:policy/v3" in got.policy_sources
    assert learned_decision({"other": "confirm"}, 3, DEFAULT_POLICY, ("label",), TABLE, BRIEF) is BRIEF


def test_a_learned_auto_lifts_a_high_risk_confirm_into_the_brief_with_its_undo_window() -> None:
    got = learned_decision({"close": "auto"}, 4, DEFAULT_POLICY, ("close",), TABLE, HIGH)
    assert (got.action, got.gate_result, got.undo_window_s) == ("auto", "brief", DEFAULT_POLICY.undo_window_seconds)
    assert [r.code for r in got.gate_reasons] == ["learned_auto"]


@pytest.mark.parametrize(
    ("actions", "table", "decision"),
    [
        (("external_commitment_send",), TABLE, HIGH),  # irreversible by policy
        (("payment_or_contract_change",), TABLE, HIGH),  # always_require_confirmation
        (("close",), replace(TABLE, reversibility="irreversible"), HIGH),  # declared irreversible
        (("close",), TABLE, replace(HIGH, gate_reasons=(Reason("irreversible_needs_confirmation", "..."),))),
        (("close",), replace(TABLE, action="gated"), replace(HIGH, gate_reasons=(Reason("gate_confirm", "..."),))),
        (("close", "send"), TABLE, HIGH),  # one action of the task is not learned as auto
    ],
)
def test_a_learned_auto_never_lifts_anything_else(
    actions: tuple[str, ...], table: GovernanceDecision, decision: GovernanceDecision
) -> None:
    rules = {a: "auto" for a in ("external_commitment_send", "payment_or_contract_change", "close")}
    assert learned_decision(rules, 5, DEFAULT_POLICY, actions, table, decision) is decision  # type: ignore[arg-type]
