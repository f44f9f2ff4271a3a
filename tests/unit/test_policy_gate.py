"""The Policy Gate: irreversible is never silent under any setting, the high-risk conditions one by
one, policy resolution (defaults <- tenant <- worker), and the gate inside TaskGovernanceStage."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pydantic import ValidationError

from genworker.tools.base import Effect
from genworker.worker.governance import GovernanceInput, TaskGovernanceStage
from genworker.worker.governance.policy_gate import (
    DEFAULT_POLICY,
    PlannedAction,
    Policy,
    PolicyGate,
    resolve_policy,
)
from genworker.workspace.models import PersonaSpec, Tenant
from genworker.workspace.models.policy import PolicyOverrides

GATE = PolicyGate()
WHITELISTED = "internal_status_transition"
GOOD = {"confidence": 0.99, "sources": ("github", "email"), "undo_available": True}


def permissive(**extra: Any) -> Policy:
    overrides = PolicyOverrides.model_validate(
        {
            "high_risk_auto_enabled": True,
            "high_risk_confidence_threshold": 0.5,
            "require_multi_source_count": 2,
            "high_risk_whitelist": [WHITELISTED, "external_commitment_send", "delete_external_record", "x"],
            **extra,
        }
    )
    return resolve_policy(overrides)


# -- irreversible: every combination of settings and inputs -------------------------------------


SETTINGS = [
    {"high_risk_auto_enabled": enabled, "high_risk_confidence_threshold": threshold, "undo_window_seconds": undo}
    for enabled, threshold, undo in itertools.product((True, False), (0.5, 0.92, 1.0), (1, 60, 3600))
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_irreversible_is_never_auto_under_any_setting(settings: dict[str, Any]) -> None:
    policy = permissive(**settings)
    inputs = itertools.product(
        ("low", "medium", "high"),
        (0.0, 0.92, 1.0, None),
        ((), ("a",), ("a", "b"), ("a", "b", "c")),
        (True, False),  # undo available
        (True, False),  # contract authorised
        ("x", WHITELISTED),
    )
    for risk, confidence, sources, undo, authorised, name in inputs:
        action = PlannedAction(name, risk, "irreversible", confidence, sources, undo, authorised, "P0")  # type: ignore[arg-type]
        verdict = GATE.evaluate(action, policy)
        assert verdict.result == "confirm", (action, verdict)
        assert not verdict.runs


@pytest.mark.parametrize("name", DEFAULT_POLICY.irreversible_actions)
def test_named_irreversible_actions_stay_irreversible_even_when_declared_reversible(name: str) -> None:
    for risk in ("low", "medium", "high"):
        verdict = GATE.evaluate(PlannedAction(name, risk, "reversible", 1.0, ("a", "b"), True, True), permissive())  # type: ignore[arg-type]
        assert (verdict.result, verdict.reversibility) == ("confirm", "irreversible")
        assert verdict.reasons[0].code == "irreversible_needs_confirmation"


def test_no_setting_turns_off_the_irreversible_rules() -> None:
    for field in ("forbid_silent_execution_for_irreversible", "require_manual_click_for_irreversible"):
        for value in (False, "false", 0, None):
            with pytest.raises(ValidationError, match="cannot be turned off"):
                PolicyOverrides.model_validate({field: value})
        with pytest.raises(ValidationError, match=rf"policy\.{field}"):
            Tenant.model_validate({"tenant_id": "acme", "policy": {field: False}})


def test_lists_of_irreversible_actions_only_grow() -> None:
    tenant = PolicyOverrides.model_validate({"irreversible_actions": ["wire_money"]})
    worker = PolicyOverrides.model_validate({"irreversible_actions": [], "always_require_confirmation": []})
    policy = resolve_policy(tenant, worker)
    assert set(DEFAULT_POLICY.irreversible_actions) | {"wire_money"} == set(policy.irreversible_actions)
    assert set(DEFAULT_POLICY.always_require_confirmation) <= set(policy.always_require_confirmation)


# -- high risk: all conditions needed ------------------------------------------------------------


def test_high_risk_auto_when_every_condition_holds() -> None:
    verdict = GATE.evaluate(PlannedAction(WHITELISTED, "high", "reversible", **GOOD), permissive())
    assert (verdict.result, verdict.reasons[0].code) == ("brief", "high_risk_auto")
    undo = GATE.evaluate(PlannedAction(WHITELISTED, "high", "undo_window", **GOOD), permissive())
    assert undo.runs


@pytest.mark.parametrize(
    ("change", "policy_change", "needs"),
    [
        ({}, {"high_risk_auto_enabled": False}, "enable high_risk_auto_enabled"),
        ({"confidence": 0.91}, {"high_risk_confidence_threshold": 0.92}, "confidence >= 0.92 (got 0.91)"),
        ({"confidence": None}, {}, "confidence >= 0.5 (got None)"),
        ({"sources": ("github", "github")}, {}, ">= 2 independent sources (got 1)"),
        ({"sources": ("a", "b")}, {"require_multi_source_count": 3}, ">= 3 independent sources (got 2)"),
        ({}, {"high_risk_whitelist": ["something_else"]}, f"{WHITELISTED!r} in high_risk_whitelist"),
        ({"reversibility": "undo_window", "undo_available": False}, {}, "a working undo inside the 60 s undo window"),
    ],
)
def test_each_high_risk_condition_is_required(
    change: dict[str, Any], policy_change: dict[str, Any], needs: str
) -> None:
    fields: dict[str, Any] = {"reversibility": "reversible", **GOOD, **change}
    verdict = GATE.evaluate(PlannedAction(WHITELISTED, "high", **fields), permissive(**policy_change))
    assert verdict.result == "confirm"
    assert verdict.reasons[0].code == "high_risk_needs_confirmation"
    assert needs in verdict.reasons[0].message


def test_high_risk_is_off_by_default() -> None:
    verdict = GATE.evaluate(PlannedAction(WHITELISTED, "high", "reversible", **GOOD), DEFAULT_POLICY)
    assert verdict.result == "confirm"
    assert "enable high_risk_auto_enabled" in verdict.reasons[0].message


def test_low_medium_and_table_outcomes() -> None:
    assert GATE.evaluate(PlannedAction("label", "low", "reversible"), DEFAULT_POLICY).result == "auto"
    assert GATE.evaluate(PlannedAction("label", "low", "undo_window"), DEFAULT_POLICY).result == "brief"
    assert GATE.evaluate(PlannedAction("label", "medium", "reversible"), DEFAULT_POLICY).result == "brief"
    assert GATE.evaluate(PlannedAction("x", "low", "reversible"), DEFAULT_POLICY, table_action="gated").result == (
        "confirm"
    )
    blocked = GATE.evaluate(PlannedAction("x", "low", "reversible"), DEFAULT_POLICY, table_action="blocked")
    assert blocked.result == "blocked"


# -- resolution -----------------------------------------------------------------------------------


def test_worker_overrides_tenant_overrides_defaults() -> None:
    tenant = Tenant.model_validate(
        {"tenant_id": "acme", "policy": {"interruption_budget_per_day": 5, "brief_window_hours": 2}}
    )
    persona = PersonaSpec.model_validate(
        {"identity": {"name": "W", "worker_id": "w"}, "policy": {"interruption_budget_per_day": 3}}
    )
    policy = resolve_policy(tenant.policy, persona.policy)
    assert (policy.interruption_budget_per_day, policy.brief_window_hours) == (3, 2)
    assert policy.high_risk_confidence_threshold == 0.92 and policy.undo_window_seconds == 60
    assert policy.as_dict()["quiet_hours"]["rule"] == "meeting_or_focus_only_p0"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"interruption_budget_per_day": -1}, "interruption_budget_per_day"),
        ({"require_multi_source_count": 1}, "require_multi_source_count"),
        ({"quiet_hours": {"windows": ["25:00-08:00"]}}, "quiet_hours.windows"),
        ({"quiet_hours": {"timezone": "Mars/Olympus"}}, "quiet_hours.timezone"),
        ({"waiting_timeout_action": "explode"}, "waiting_timeout_action"),
    ],
)
def test_bad_policy_values_name_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Tenant.model_validate({"tenant_id": "acme", "policy": data})
    assert f"policy.{field}" in str(caught.value)


# -- inside the governance stage ------------------------------------------------------------------

CONTRACT = """
triggers:
  - {id: hook, type: event, source: github}
contract:
  version: "1"
  decision_scope:
    - "auto: external_commitment_send"
    - "auto: internal_status_transition"
"""


@pytest.fixture
def stage_setup(ws: Any) -> tuple[TaskGovernanceStage, Any]:
    ws.persona(extra="policy:\n  high_risk_auto_enabled: true\n  high_risk_confidence_threshold: 0.5\n")
    ws.duty("ops", CONTRACT)
    worker = ws.load_worker()[0]
    return TaskGovernanceStage(ws.root), worker


def _input(worker: Any, **fields: Any) -> GovernanceInput:
    tenant = Tenant.model_validate({"tenant_id": "acme", "trust_level": 3, "policy": {"high_risk_auto_enabled": True}})
    return GovernanceInput(tenant, worker, "go", source_type="event", duty_id="ops", **fields)


def test_stage_gates_an_irreversible_action_even_when_the_contract_and_policy_allow_it(stage_setup: Any) -> None:
    stage, worker = stage_setup
    outcome = stage.evaluate(
        _input(
            worker,
            requested_actions=("external_commitment_send",),
            requested_effects=frozenset({Effect.EXTERNAL}),
            confidence=1.0,
            evidence_sources=("a", "b"),
            undo_available=True,
        )
    )
    decision = outcome.decision
    assert (decision.action, decision.gate_result, decision.reversibility) == ("gated", "confirm", "irreversible")
    assert "irreversible_needs_confirmation" in decision.codes
    assert outcome.gate_ref is not None  # the existing confirmation flow takes it from here
    snapshot = stage.snapshots.load_policy("acme", "w", outcome.manifest.policy_ref)
    assert snapshot.decision.gate_result == "confirm"
    assert snapshot.decision.gate_reasons[0].code == "irreversible_needs_confirmation"


def test_stage_records_brief_for_contract_authorised_work(stage_setup: Any) -> None:
    stage, worker = stage_setup
    outcome = stage.evaluate(
        _input(
            worker, requested_actions=("internal_status_transition",), requested_effects=frozenset({Effect.EXTERNAL})
        )
    )
    assert (outcome.decision.action, outcome.decision.gate_result) == ("auto", "brief")
    assert outcome.as_dict()["decision"]["gate_reasons"][0]["code"] == "high_risk_auto"


def test_stage_chat_is_gated_only_for_named_irreversible_actions(stage_setup: Any) -> None:
    stage, worker = stage_setup
    tenant = Tenant(tenant_id="acme", trust_level=3)
    chat = stage.evaluate(GovernanceInput(tenant, worker, "hi", source_type="chat"))
    assert (chat.decision.action, chat.decision.gate_result) == ("auto", "auto")
    named = stage.evaluate(
        GovernanceInput(tenant, worker, "pay", source_type="chat", requested_actions=("payment_or_contract_change",))
    )
    assert (named.decision.action, named.decision.gate_result) == ("gated", "confirm")


def test_snapshots_written_before_the_gate_still_load(stage_setup: Any) -> None:
    """A snapshot without gate fields keeps its content hash (its name) valid."""
    import json

    from genworker.worker.governance.snapshots import PolicyDecisionRecord, PolicyInputs, PolicySnapshot, digest

    stage, _ = stage_setup
    record = PolicyDecisionRecord(action="auto", posture="normal", risk_tier="low", reversibility="reversible",
                                  reasons=(), policy_sources=())  # fmt: skip
    old = PolicySnapshot(
        table_version=1, tenant_id="acme", worker_id="w", decision=record,
        inputs=PolicyInputs(trust_level=2, source_type="chat", source_class="interactive"),
    )  # fmt: skip
    data = old.model_dump(mode="json")
    assert "gate_result" not in data["decision"]
    path, ref = stage.snapshots.save_policy(old)
    assert "gate_result" not in json.loads((stage.snapshots.worker_dir("acme", "w") / path).read_text("utf-8"))
    assert stage.snapshots.load_policy("acme", "w", ref) == old
    assert ref.endswith(digest(old))


def test_a_persons_approval_lets_the_confirmed_irreversible_action_run(ws: Any) -> None:
    from genworker.worker.governance import Approval, ApprovalResolver, InMemoryApprovals

    ws.persona()
    ws.duty("ops", CONTRACT)
    worker = ws.load_worker()[0]
    approvals = InMemoryApprovals()
    stage = TaskGovernanceStage(ws.root, approvals=ApprovalResolver(approvals))
    fields: dict[str, Any] = {"requested_actions": ("external_commitment_send",)}
    gated = stage.evaluate(_input(worker, **fields))
    assert (gated.decision.action, gated.gate_ref is not None) == ("gated", True)
    approvals.add(Approval("conf-1", "acme", "w", "approved", policy_ref=gated.gate_ref, decided_by="dana"))
    approved = stage.evaluate(_input(worker, approval_ref="conf-1", **fields))
    assert (approved.decision.action, approved.decision.posture) == ("auto", "gated_execute")
    assert approved.decision.gate_result == "confirm"  # the gate's answer stands; the person gave it
    assert approved.manifest.approval_ref == "conf-1"
    # an approval for another decision does not lift it
    approvals.add(Approval("conf-2", "acme", "w", "approved", policy_ref="snapshot:policy:0123456789ab"))
    assert stage.evaluate(_input(worker, approval_ref="conf-2", **fields)).decision.action == "gated"
