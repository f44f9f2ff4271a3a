"""Confidence and evidence reach the Policy Gate: a fact's payload is validated field by field, and
with a working undo window high risk runs (armed with `undo_window_s`) only when every Steward
condition holds; irreversible actions still always confirm."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.tools.base import Effect
from genworker.worker.governance import GovernanceInput, GovernanceInputError, TaskGovernanceStage
from genworker.worker.governance.evidence import Evidence, evidence_from
from genworker.workspace.models import Tenant

GOOD = {
    "confidence": 0.95,
    "evidence_sources": ["github", "email"],
    "requested_actions": ["internal_status_transition"],
    "requested_effects": ["external"],
}


def test_a_payload_gives_its_evidence() -> None:
    assert evidence_from(GOOD) == Evidence(
        0.95, ("github", "email"), ("internal_status_transition",), frozenset({Effect.EXTERNAL})
    )
    assert evidence_from({"sources": ["a", "b"], "confidence": 1}) == Evidence(1.0, ("a", "b"))
    assert evidence_from({"text": "no evidence"}) == Evidence()
    assert evidence_from(evidence_from(GOOD).as_json()) == evidence_from(GOOD)  # a confirmation round-trips it


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"confidence": 1.5}, "payload.confidence must be a number between 0 and 1, got 1.5"),
        ({"confidence": True}, "payload.confidence must be a number between 0 and 1"),
        ({"confidence": "high"}, "payload.confidence must be a number"),
        ({"evidence_sources": "github"}, "payload.evidence_sources must be a list of non-empty strings"),
        ({"sources": ["a", ""]}, "payload.sources must be a list of non-empty strings"),
        ({"evidence_sources": ["a", "b", "a"]}, "payload.evidence_sources lists ['a'] more than once"),
        ({"evidence_sources": ["a"], "sources": ["b"]}, "give one of evidence_sources or sources"),
        ({"requested_effects": ["teleport"]}, "payload.requested_effects must be a list of ['read'"),
        ({"requested_actions": [3]}, "payload.requested_actions must be a list of non-empty strings"),
    ],
)
def test_malformed_evidence_is_refused_naming_the_field(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(GovernanceInputError) as raised:
        evidence_from(payload)
    assert message in str(raised.value)


def stage(ws: Any, policy: str = "high_risk_auto_enabled: true") -> tuple[TaskGovernanceStage, Any]:
    ws.persona(extra=f"policy:\n  {policy}\n")
    ws.duty("ops")  # a duty without a contract: no `auto:` entry authorises anything
    return TaskGovernanceStage(ws.root), ws.load_worker()[0]


def evaluate(
    ws: Any, payload: dict[str, Any], *, undo: bool = True, policy: str = "high_risk_auto_enabled: true"
) -> Any:
    governance, worker = stage(ws, policy)
    ev = evidence_from(payload)
    inp = GovernanceInput(
        Tenant(tenant_id="acme", trust_level=2), worker, "go", source_type="event", duty_id="ops",
        requested_actions=ev.actions, requested_effects=ev.effects, confidence=ev.confidence,
        evidence_sources=ev.sources, undo_available=undo,
    )  # fmt: skip
    return governance.evaluate(inp)


def test_high_risk_auto_through_evidence_arms_the_undo_window(ws: Any) -> None:
    outcome = evaluate(ws, GOOD)
    decision = outcome.decision
    assert (decision.action, decision.gate_result, decision.undo_window_s) == ("auto", "brief", 60)
    assert (decision.risk_tier, decision.reversibility) == ("high", "undo_window")
    assert decision.gate_reasons[0].code == "high_risk_auto_undo_window"
    snapshot = TaskGovernanceStage(ws.root).snapshots.load_policy("acme", "w", outcome.manifest.policy_ref)
    assert (snapshot.inputs.confidence, snapshot.inputs.evidence_sources) == (0.95, ("github", "email"))
    assert snapshot.decision.undo_window_s == 60


def test_the_window_length_is_the_policy_s(ws: Any) -> None:
    outcome = evaluate(ws, GOOD, policy="{high_risk_auto_enabled: true, undo_window_seconds: 300}")
    assert outcome.decision.undo_window_s == 300


@pytest.mark.parametrize(
    ("change", "unmet"),
    [
        ({"confidence": 0.9}, "confidence >= 0.92 (got 0.9)"),
        ({"confidence": None}, "confidence >= 0.92 (got None)"),
        ({"evidence_sources": ["github"]}, ">= 2 independent sources (got 1)"),
        ({"requested_actions": ["post_to_customer"]}, "'post_to_customer' in high_risk_whitelist"),
    ],
)
def test_each_unmet_condition_means_confirm_and_nothing_is_held(ws: Any, change: dict[str, Any], unmet: str) -> None:
    payload = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    decision = evaluate(ws, payload).decision
    assert (decision.action, decision.gate_result, decision.undo_window_s) == ("gated", "confirm", None)
    assert unmet in decision.gate_reasons[0].message


def test_without_the_tenant_switch_it_confirms(ws: Any) -> None:
    decision = evaluate(ws, GOOD, policy="high_risk_auto_enabled: false").decision
    assert (decision.gate_result, decision.undo_window_s) == ("confirm", None)
    assert "the tenant to enable high_risk_auto_enabled" in decision.gate_reasons[0].message


def test_without_a_working_undo_external_work_stays_irreversible(ws: Any) -> None:
    decision = evaluate(ws, GOOD, undo=False).decision
    assert (decision.action, decision.reversibility, decision.undo_window_s) == ("gated", "irreversible", None)
    assert "autonomous_irreversible" in decision.codes


@pytest.mark.parametrize("threshold", ["0.5", "0.92", "1.0"])
def test_irreversible_always_confirms_whatever_the_evidence(ws: Any, threshold: str) -> None:
    policy = f"{{high_risk_auto_enabled: true, high_risk_confidence_threshold: {threshold}, undo_window_seconds: 3600}}"
    payload = {**GOOD, "confidence": 1.0, "requested_actions": ["external_commitment_send"]}
    decision = evaluate(ws, payload, policy=policy).decision
    assert (decision.action, decision.gate_result, decision.undo_window_s) == ("gated", "confirm", None)
    assert decision.reversibility == "irreversible" and "irreversible_needs_confirmation" in decision.codes
