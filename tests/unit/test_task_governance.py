"""TaskGovernanceStage: one test (at least) per row of the decision table, the postures, the
reasons, approvals lifting a gate, and the manifest fields."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import Effect
from genworker.worker.governance import (
    RULES,
    TABLE_SOURCE,
    Approval,
    ApprovalResolver,
    GovernanceInput,
    GovernanceInputError,
    GovernanceOutcome,
    InMemoryApprovals,
    TaskGovernanceStage,
)
from genworker.workspace.models import Tenant
from genworker.workspace.snapshot import Worker

DOCS = Path(__file__).resolve().parents[2] / "docs" / "governance.md"
EXTERNAL = frozenset({Effect.EXTERNAL})

TRIAGE = """
triggers:
  - {id: new-mail, type: event, source: mailbox}
  - {id: sweep, type: schedule, interval: 30m}
  - {id: rerun, type: manual}
execution_policy:
  default: standard
  overrides: {sweep: deep}
posture:
  default: execute
  overrides: {sweep: propose, rerun: draft}
skill_id: triage
skill_hint: summarize
preferred_skill_ids: [summarize, triage]
contract:
  version: "2026.10"
  decision_scope:
    - "auto: label and categorise mail"
    - "auto: post the summary to #inbox"
    - "suggest: reschedule meetings"
    - "must_confirm: send any reply"
    - "blocked: delete mail"
    - "a note without a verdict"
  approval:
    required_for: [forward]
process_step: {process_id: ceo-office-mail, step_id: triage, step_name: Triage mail}
"""


class Setup:
    """A small workspace for tenant acme / worker w, and the stage over it."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        ws.persona(
            extra="""
            sensor_configs:
              - {source_type: webhook, sensor_id: crm-hook, require_approval: true}
              - {source_type: git, require_approval: false}
              - {source_type: email}
            """
        )
        ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nexecution_log_retention: 30d\n---\n")
        ws.duty("triage", TRIAGE)
        ws.duty("report", 'contract:\n  version: "1.0"\n  approval: {required: true}\n')
        ws.duty("closed-one", "status: closed\n")
        ws.duty("deprecated-one", "status: deprecated\n")
        ws.duty("old", "triggers: [{id: m, type: manual}]\nexecution_policy: {default: propose}\n")
        ws.duty("shared-a", "triggers:\n  - {id: shared, type: manual}\n")
        ws.duty("shared-b", "triggers:\n  - {id: shared, type: manual}\n")
        ws.write(
            "tenants/acme/workers/w/goals/launch.md", "---\ngoal_id: launch\ntitle: L\nprimary_duty_id: triage\n---\n"
        )
        ws.write("tenants/acme/workers/w/goals/paused.md", "---\ngoal_id: paused\ntitle: P\nstatus: paused\n---\n")
        for name in ("triage", "summarize"):
            ws.skill(f"tenants/acme/workers/w/skills/{name}")
        self.worker: Worker = ws.load_worker()[0]
        self.approvals = InMemoryApprovals()
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
        self.stage = TaskGovernanceStage(ws.root, approvals=ApprovalResolver(self.approvals, clock=lambda: self.now))

    def input(self, trust: int = 2, **fields: Any) -> GovernanceInput:
        return GovernanceInput(Tenant(tenant_id="acme", trust_level=trust), self.worker, "do the thing", **fields)

    def run(self, trust: int = 2, **fields: Any) -> GovernanceOutcome:
        return self.stage.evaluate(self.input(trust, **fields))

    def approve(self, ref: str, gate_ref: str | None, **fields: Any) -> None:
        values: dict[str, Any] = {"status": "approved", "policy_ref": gate_ref, "decided_by": "dana", **fields}
        self.approvals.add(Approval(ref, "acme", "w", **values))


@pytest.fixture
def s(ws) -> Setup:
    return Setup(ws)


def summary(outcome: GovernanceOutcome) -> tuple[str, str, tuple[str, ...]]:
    return outcome.decision.action, outcome.decision.posture, outcome.decision.codes


# -- blocked -------------------------------------------------------------------------------


def test_goal_unknown(s) -> None:
    outcome = s.run(source_type="goal", goal_id="ghost")
    assert outcome.decision.action == "blocked"
    assert outcome.decision.reasons[0] == ("goal_unknown", "goal 'ghost' is not a goal of worker acme/w")


def test_goal_inactive(s) -> None:
    action, posture, codes = summary(s.run(source_type="goal", goal_id="paused", duty_id="triage"))
    assert (action, posture, codes[0]) == ("blocked", "proposal_only", "goal_inactive")
    assert "goal 'paused' is paused" in s.run(source_type="goal", goal_id="paused").decision.reasons[0].message


def test_duty_unknown(s) -> None:
    outcome = s.run(source_type="task", duty_id="ghost")
    assert summary(outcome) == ("blocked", "proposal_only", ("duty_unknown",))
    assert outcome.decision.reasons[0].message == "duty 'ghost' is not a duty of worker acme/w"
    assert outcome.manifest.duty_id is None


@pytest.mark.parametrize(("duty", "status"), [("closed-one", "closed"), ("deprecated-one", "deprecated")])
def test_duty_inactive(s, duty: str, status: str) -> None:
    outcome = s.run(source_type="task", duty_id=duty)
    assert summary(outcome) == ("blocked", "proposal_only", ("duty_inactive",))
    assert outcome.decision.reasons[0].message == f"duty {duty!r} is {status}; only active duties run"


def test_trigger_unknown(s) -> None:
    assert s.run(source_type="event", duty_id="triage", trigger_id="nope").decision.codes == ("trigger_unknown",)
    assert s.run(source_type="event", trigger_id="nope").decision.codes == ("trigger_unknown", "no_mandate")
    assert s.run(source_type="event", trigger_id="nope").decision.action == "blocked"


def test_trigger_ambiguous(s) -> None:
    outcome = s.run(source_type="event", trigger_id="shared")
    assert outcome.decision.action == "blocked"
    assert outcome.decision.codes[0] == "trigger_ambiguous"


def test_scope_blocked_even_for_a_proposal(s) -> None:
    outcome = s.run(source_type="task", duty_id="triage", requested_actions=("delete",))
    assert summary(outcome) == ("blocked", "proposal_only", ("scope_blocked",))
    assert outcome.decision.reasons[0].message == (
        "the contract of duty 'triage' forbids 'delete' ('blocked: delete mail')"
    )
    proposal = s.run(source_type="task", duty_id="triage", trigger_id="rerun", requested_actions=("delete mail",))
    assert proposal.decision.action == "blocked"


def test_an_approval_never_lifts_a_block(s) -> None:
    s.approve("ok-1", None)
    outcome = s.run(source_type="task", duty_id="closed-one", approval_ref="ok-1")
    assert summary(outcome) == ("blocked", "proposal_only", ("duty_inactive", "approval_unused"))
    assert outcome.manifest.approval_ref is None


# -- postures ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["chat", "openai"])
def test_trust_zero_conversation_is_degraded(s, source: str) -> None:
    outcome = s.run(trust=0, source_type=source)
    assert summary(outcome) == ("auto", "degraded", ("trust_zero_conversation",))
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("low", "reversible")


@pytest.mark.parametrize("source", ["task", "duty", "event", "schedule", "sensor", "heartbeat", "goal"])
def test_trust_zero_everything_else_is_proposal_only(s, source: str) -> None:
    outcome = s.run(trust=0, source_type=source, duty_id="triage", trigger_id="new-mail")
    assert outcome.decision.posture == "proposal_only"
    assert outcome.decision.action == "auto"
    assert "trust_zero" in outcome.decision.codes


def test_trust_below_effects(s) -> None:
    outcome = s.run(trust=1, source_type="chat", requested_effects=EXTERNAL)
    assert summary(outcome) == ("auto", "proposal_only", ("trust_below_effects",))
    assert "['external'] need a higher trust level than the tenant's 1" in outcome.decision.reasons[0].message
    assert s.run(trust=1, source_type="chat", requested_effects=frozenset({Effect.WRITE})).decision.posture == "normal"


def test_posture_propose(s) -> None:
    outcome = s.run(source_type="schedule", duty_id="triage", trigger_id="sweep")
    assert summary(outcome) == ("auto", "proposal_only", ("posture_propose",))
    assert (outcome.manifest.duty_posture, outcome.manifest.execution_depth) == ("propose", "deep")


def test_posture_draft(s) -> None:
    outcome = s.run(source_type="task", duty_id="triage", trigger_id="rerun")
    assert summary(outcome) == ("auto", "proposal_only", ("posture_draft",))
    assert "drafts only" in outcome.decision.reasons[0].message


def test_posture_execute_is_normal(s) -> None:
    outcome = s.run(source_type="event", duty_id="triage", trigger_id="new-mail")
    assert summary(outcome) == ("auto", "normal", ("default",))
    assert (outcome.manifest.duty_posture, outcome.manifest.execution_depth) == ("execute", "standard")


def test_the_old_posture_spelling_in_execution_policy_still_governs(s) -> None:
    """`execution_policy: {default: propose}` (before postures had their own field) loads as the posture."""
    outcome = s.run(source_type="task", duty_id="old", trigger_id="m")
    assert summary(outcome) == ("auto", "proposal_only", ("posture_propose",))
    assert (outcome.manifest.duty_posture, outcome.manifest.execution_depth) == ("propose", "standard")


@pytest.mark.parametrize("source", ["heartbeat", "sensor", "event", "goal"])
def test_no_mandate_for_autonomous_work_without_a_duty(s, source: str) -> None:
    outcome = s.run(source_type=source)
    assert summary(outcome) == ("auto", "proposal_only", ("no_mandate",))


def test_autonomous_work_is_more_conservative_than_chat(s) -> None:
    assert s.run(source_type="chat").decision.posture == "normal"
    assert s.run(source_type="heartbeat").decision.posture == "proposal_only"
    chat = s.run(source_type="chat", duty_id="triage", requested_effects=EXTERNAL)
    event = s.run(source_type="event", duty_id="triage", requested_effects=EXTERNAL)
    assert (chat.decision.action, event.decision.action) == ("auto", "gated")


def test_scope_suggest(s) -> None:
    outcome = s.run(source_type="task", duty_id="triage", requested_actions=("reschedule",))
    assert summary(outcome) == ("auto", "proposal_only", ("scope_suggest",))


def test_the_strictest_posture_wins(s) -> None:
    outcome = s.run(trust=0, source_type="chat", duty_id="triage", trigger_id="rerun")
    assert summary(outcome) == ("auto", "proposal_only", ("trust_zero_conversation", "posture_draft"))


# -- gates ---------------------------------------------------------------------------------


def test_approval_required(s) -> None:
    outcome = s.run(source_type="task", duty_id="report")
    assert summary(outcome) == ("gated", "proposal_only", ("approval_required",))
    assert outcome.gate_ref == outcome.manifest.policy_ref
    assert not outcome.decision.runnable


def test_approval_required_for_a_listed_action(s) -> None:
    outcome = s.run(source_type="task", duty_id="triage", requested_actions=("forward to Sam",))
    assert summary(outcome) == ("gated", "proposal_only", ("approval_required_for",))
    assert s.run(source_type="task", duty_id="triage", requested_actions=("label",)).decision.action == "auto"


def test_scope_confirm_is_irreversible_and_never_silent(s) -> None:
    outcome = s.run(source_type="chat", duty_id="triage", requested_actions=("send",))
    assert summary(outcome) == ("gated", "proposal_only", ("scope_confirm",))
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("high", "irreversible")
    assert outcome.manifest.risk_tier == "high"


def test_sensor_requires_approval(s) -> None:
    outcome = s.run(source_type="sensor", source_id="crm-hook", duty_id="triage")
    assert summary(outcome) == ("gated", "proposal_only", ("sensor_requires_approval",))
    assert s.run(source_type="sensor", source_id="git", duty_id="triage").decision.action == "auto"
    # require_approval defaults to true, as upstream genworker's sensors do
    assert s.run(source_type="sensor", source_id="email", duty_id="triage").decision.action == "gated"


def test_autonomous_irreversible(s) -> None:
    outcome = s.run(source_type="event", duty_id="triage", trigger_id="new-mail", requested_effects=EXTERNAL)
    assert summary(outcome) == ("gated", "proposal_only", ("autonomous_irreversible",))
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("high", "irreversible")


def test_an_auto_entry_authorises_autonomous_external_work(s) -> None:
    outcome = s.run(
        source_type="event", duty_id="triage", requested_effects=EXTERNAL, requested_actions=("post the summary",)
    )
    assert summary(outcome) == ("auto", "normal", ("contract_authorised",))
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("high", "undo_window")
    # an action also touched by a stricter entry is not authorised
    mixed = s.run(source_type="event", duty_id="triage", requested_effects=EXTERNAL, requested_actions=("send",))
    assert set(mixed.decision.codes) == {"scope_confirm", "autonomous_irreversible"}


def test_a_read_only_posture_makes_gates_moot(s) -> None:
    outcome = s.run(source_type="task", duty_id="triage", trigger_id="rerun", requested_actions=("send",))
    assert summary(outcome) == ("auto", "proposal_only", ("posture_draft", "scope_confirm", "gate_moot"))
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("low", "reversible")
    assert outcome.gate_ref is None


def test_a_person_asking_in_chat_for_external_effects(s) -> None:
    outcome = s.run(source_type="chat", requested_effects=EXTERNAL)
    assert summary(outcome) == ("auto", "normal", ("requester_present",))
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("high", "irreversible")


# -- default, risk and reasons -------------------------------------------------------------


def test_default_chat(s) -> None:
    outcome = s.run(source_type="chat")
    assert summary(outcome) == ("auto", "normal", ("default",))
    assert outcome.decision.reasons[0].message == "no rule restricts chat work at trust 2"
    assert (outcome.decision.risk_tier, outcome.decision.reversibility) == ("medium", "undo_window")  # undeclared


@pytest.mark.parametrize(
    ("effects", "risk", "reversibility"),
    [
        ({Effect.READ, Effect.COMPUTE}, "low", "reversible"),
        ({Effect.READ, Effect.WRITE}, "medium", "undo_window"),
        ({Effect.DELEGATE}, "medium", "undo_window"),
        ({Effect.EXTERNAL}, "high", "irreversible"),
    ],
)
def test_risk_follows_the_requested_effects(s, effects: set[Effect], risk: str, reversibility: str) -> None:
    decision = s.run(source_type="task", requested_effects=frozenset(effects)).decision
    assert (decision.risk_tier, decision.reversibility) == (risk, reversibility)


def test_every_rule_that_fires_has_a_reason(s) -> None:
    outcome = s.run(trust=0, source_type="event", duty_id="closed-one", requested_effects=EXTERNAL)
    assert outcome.decision.codes == ("duty_inactive", "trust_zero", "trust_below_effects", "autonomous_irreversible")
    assert outcome.decision.action == "blocked"
    assert all(r.message for r in outcome.decision.reasons)
    assert str(outcome.decision.reasons[1]) == "trust_zero: tenant trust level 0: event work may only prepare proposals"


def test_decisions_are_deterministic(s) -> None:
    first = s.run(source_type="event", duty_id="triage", requested_effects=EXTERNAL, requested_actions=("send",))
    second = s.run(source_type="event", duty_id="triage", requested_effects=EXTERNAL, requested_actions=("send",))
    assert first == second


def test_policy_sources(s, ws) -> None:
    outcome = s.run(source_type="goal", goal_id="launch")
    assert outcome.decision.policy_sources == (
        "tenants/acme/TENANT.json",
        "tenants/acme/workers/w/PERSONA.md",
        "tenants/acme/workers/w/goals/launch.md",
        "tenants/acme/workers/w/duties/triage.md",
        "tenants/acme/workers/w/duties/_defaults.md",
        TABLE_SOURCE,
    )
    assert s.run(source_type="chat").decision.policy_sources == (
        "tenants/acme/TENANT.json",
        "tenants/acme/workers/w/PERSONA.md",
        TABLE_SOURCE,
    )


# -- approvals -----------------------------------------------------------------------------


def test_an_approval_lifts_the_gate_once_and_for_all(s) -> None:
    gated = s.run(source_type="task", duty_id="report")
    s.approve("conf-1", gated.gate_ref)
    approved = s.run(source_type="task", duty_id="report", approval_ref="conf-1")
    assert summary(approved) == ("auto", "gated_execute", ("approval_required", "approval_granted"))
    assert approved.decision.reasons[-1].message == "approval 'conf-1' was given by dana"
    assert approved.manifest.approval_ref == "conf-1"
    assert approved.decision.policy_sources[-1] == "approval:conf-1"
    assert approved.gate_ref == gated.gate_ref
    assert approved.manifest.policy_ref != gated.manifest.policy_ref
    again = s.run(source_type="task", duty_id="report", approval_ref="conf-1")  # a resumed run: no new confirmation
    assert again.decision.action == "auto"
    assert again.manifest.policy_ref == approved.manifest.policy_ref


def test_an_approval_for_other_work_does_not_count(s) -> None:
    other = s.run(source_type="task", duty_id="triage", requested_actions=("send",))
    s.approve("conf-2", other.gate_ref)
    outcome = s.run(source_type="task", duty_id="report", approval_ref="conf-2")
    assert summary(outcome) == ("gated", "proposal_only", ("approval_required", "approval_mismatch"))
    assert outcome.manifest.approval_ref is None


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"status": "rejected"}, "approval_rejected"),
        ({"status": "pending"}, "approval_pending"),
        ({"expires_at": datetime(2026, 3, 1, 8, 0, tzinfo=UTC)}, "approval_expired"),
        ({"policy_ref": None}, "approval_mismatch"),
    ],
)
def test_approvals_that_do_not_admit(s, fields: dict[str, Any], code: str) -> None:
    gate_ref = s.run(source_type="task", duty_id="report").gate_ref
    s.approve("conf-3", gate_ref, **fields)
    outcome = s.run(source_type="task", duty_id="report", approval_ref="conf-3")
    assert summary(outcome) == ("gated", "proposal_only", ("approval_required", code))


def test_an_unexpired_approval_admits(s) -> None:
    gate_ref = s.run(source_type="task", duty_id="report").gate_ref
    s.approve("conf-4", gate_ref, expires_at=s.now + timedelta(minutes=5))
    assert s.run(source_type="task", duty_id="report", approval_ref="conf-4").decision.action == "auto"


def test_unknown_and_unverifiable_approvals(s, ws) -> None:
    assert s.run(source_type="task", duty_id="report", approval_ref="nope").decision.codes[-1] == "approval_unknown"
    bare = TaskGovernanceStage(ws.root)
    outcome = bare.evaluate(s.input(source_type="task", duty_id="report", approval_ref="x"))
    assert summary(outcome) == ("gated", "proposal_only", ("approval_required", "approval_unverifiable"))


def test_another_workers_approval_does_not_count(s) -> None:
    gate_ref = s.run(source_type="task", duty_id="report").gate_ref
    s.approvals.add(Approval("conf-5", "acme", "other", "approved", gate_ref))
    assert s.run(source_type="task", duty_id="report", approval_ref="conf-5").decision.codes[-1] == "approval_unknown"


def test_an_approval_that_is_not_needed(s) -> None:
    outcome = s.run(source_type="chat", approval_ref="conf-6")
    assert summary(outcome) == ("auto", "normal", ("default", "approval_unused"))
    assert outcome.manifest.approval_ref is None


# -- manifest fields and input checks ------------------------------------------------------


def test_manifest_fields(s) -> None:
    outcome = s.run(
        source_type="event",
        source_id="evt-1",
        duty_id="triage",
        trigger_id="new-mail",
        skill_id="summarize",
        preferred_skill_ids=("triage", "other"),
    )
    manifest = outcome.manifest
    assert manifest.as_dict() == {
        "source_type": "event",
        "source_id": "evt-1",
        "policy_snapshot_ref": manifest.policy_snapshot_ref,
        "policy_ref": manifest.policy_ref,
        "risk_tier": "medium",
        "goal_id": None,
        "duty_id": "triage",
        "trigger_id": "new-mail",
        "execution_depth": "standard",
        "duty_posture": "execute",
        "process_id": "ceo-office-mail",
        "step_id": "triage",
        "contract_version": "2026.10",
        "contract_snapshot_ref": manifest.contract_snapshot_ref,
        "approval_ref": None,
        "skill_id": "summarize",
        "skill_hint": "triage",  # the duty's skill_id before its skill_hint
        "preferred_skill_ids": ["triage", "other", "summarize"],
    }
    assert manifest.policy_snapshot_ref == f"runtime/policy_snapshots/task_governance/{manifest.policy_ref[-12:]}.json"
    assert manifest.policy_ref.startswith("snapshot:policy:")
    assert outcome.duty is not None and outcome.duty.duty_id == "triage"
    assert outcome.as_dict()["decision"]["action"] == "auto"


def test_a_goals_preferred_skills_follow_the_callers_and_the_dutys(s) -> None:
    s.ws.write(
        "tenants/acme/workers/w/goals/launch.md",
        "---\ngoal_id: launch\ntitle: L\nprimary_duty_id: triage\npreferred_skill_ids: [review, summarize]\n---\n",
    )
    s.ws.write("tenants/acme/workers/w/goals/grow.md", "---\ngoal_id: grow\ntitle: G\nskills: [review]\n---\n")
    s.ws.skill("tenants/acme/workers/w/skills/review")
    s.worker = s.ws.load_worker()[0]
    bound = s.run(source_type="goal", goal_id="launch", preferred_skill_ids=("other",)).manifest
    assert (bound.duty_id, bound.preferred_skill_ids) == ("triage", ("other", "summarize", "triage", "review"))
    alone = s.run(source_type="goal", goal_id="grow").manifest  # a goal without a duty
    assert (alone.duty_id, alone.preferred_skill_ids) == (None, ("review",))


@pytest.mark.anyio
async def test_evaluate_async_gives_the_same_outcome(s) -> None:
    inp = s.input(source_type="task", duty_id="report")
    assert await s.stage.evaluate_async(inp) == s.stage.evaluate(inp)


def test_input_checks(s) -> None:
    with pytest.raises(GovernanceInputError, match="source_type 'im' is not one of"):
        s.input(source_type="im")
    with pytest.raises(GovernanceInputError, match="belongs to tenant acme, not globex"):
        GovernanceInput(Tenant(tenant_id="globex"), s.worker)
    with pytest.raises(GovernanceInputError, match="requested effect: 'launch' is not a valid Effect"):
        s.input(requested_effects=frozenset({"launch"}))
    with pytest.raises(GovernanceInputError, match="requested_actions must be a tuple"):
        s.input(requested_actions=["send"])
    effects = s.input(requested_effects=frozenset({"external"})).requested_effects
    assert effects == EXTERNAL and all(isinstance(e, Effect) for e in effects or ())
    assert s.run(trust=1, requested_effects=frozenset({"external"})).decision.codes == ("trust_below_effects",)
    assert dataclasses.is_dataclass(s.input()) and s.input().interactive


def test_every_rule_is_documented() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    codes = [rule.code for rule in RULES]
    assert len(codes) == len(set(codes))
    extra = ["gate_moot", "requester_present", "contract_authorised", "default", "approval_granted"]
    missing = [code for code in [*codes, *extra] if f"`{code}`" not in docs]
    assert missing == []
