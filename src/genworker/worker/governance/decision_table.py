"""The task governance decision table: facts about one task in, a GovernanceDecision out.

Every row of `RULES` that applies adds its reason; the strictest outcome wins
(blocked > gated > auto; proposal_only > degraded > normal). A gate only stands when the
posture still allows side effects: a read-only run has nothing to confirm. An approval lifts
gated to auto with posture gated_execute; it never lifts blocked. docs/governance.md shows
the same table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from genworker.tools.base import Effect
from genworker.tools.context import Posture
from genworker.tools.middlewares.policy import TRUST_REQUIRED
from genworker.worker.governance.contract_terms import ContractTerms, ScopeEntry, ScopeVerdict
from genworker.worker.governance.duty_binding import DutyBinding
from genworker.worker.governance.models import (
    AUTONOMOUS_SOURCES,
    CONVERSATIONAL_SOURCES,
    INTERACTIVE_SOURCES,
    Action,
    GovernanceDecision,
    GovernanceInput,
    Reason,
    Reversibility,
    RiskTier,
    SourceType,
)
from genworker.workspace.models import DutySpec, DutyStatus, GoalStatus

__all__ = ["RULES", "TABLE_VERSION", "Facts", "Rule", "RuleEffect", "apply_approval", "decide"]

TABLE_VERSION = 3  # bump when a row changes meaning: it is part of every policy snapshot

RuleEffect = Literal["block", "degraded", "proposal_only", "gate"]
_POSTURE_RANK: dict[Posture, int] = {"normal": 0, "gated_execute": 0, "degraded": 1, "proposal_only": 2}
_SIDE_EFFECTS = frozenset({Effect.WRITE, Effect.DELEGATE})


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything the table looks at, gathered once from the input and the duty binding."""

    source_type: SourceType
    trust_level: int
    binding: DutyBinding
    terms: ContractTerms
    actions: tuple[str, ...] = ()
    effects: frozenset[Effect] | None = None
    sensor_id: str | None = None
    sensor_requires_approval: bool = False
    undo_available: bool = False  # external calls can be held in the undo window

    @classmethod
    def gather(cls, inp: GovernanceInput, binding: DutyBinding) -> Facts:
        sensor = None
        if inp.source_type == "sensor" and inp.source_id:
            sensor = next((s for s in inp.worker.persona.sensor_configs if s.key == inp.source_id), None)
        return cls(
            source_type=inp.source_type,
            trust_level=inp.tenant.trust_level,
            binding=binding,
            terms=ContractTerms.of(binding.duty.contract if binding.duty is not None else None),
            actions=inp.requested_actions,
            effects=inp.requested_effects,
            sensor_id=sensor.key if sensor is not None else None,
            sensor_requires_approval=sensor is not None and sensor.require_approval,
            undo_available=inp.undo_available,
        )

    @property
    def duty(self) -> DutySpec | None:
        return self.binding.duty

    @property
    def duty_status(self) -> str | None:
        return str(self.duty.status) if self.duty is not None else None

    @property
    def goal_status(self) -> str | None:
        return self.binding.goal.status.value if self.binding.goal is not None else None

    @property
    def conversational(self) -> bool:
        return self.source_type in CONVERSATIONAL_SOURCES

    @property
    def interactive(self) -> bool:
        return self.source_type in INTERACTIVE_SOURCES

    @property
    def autonomous(self) -> bool:
        return self.source_type in AUTONOMOUS_SOURCES

    @property
    def external(self) -> bool:
        return self.effects is not None and Effect.EXTERNAL in self.effects

    def scope(self, verdict: ScopeVerdict) -> tuple[tuple[str, ScopeEntry], ...]:
        return self.terms.matching(verdict, self.actions) if self.duty is not None else ()

    def effects_above_trust(self) -> tuple[str, ...]:
        return tuple(sorted(e.value for e in self.effects or () if TRUST_REQUIRED[e] > self.trust_level))

    def contract_authorises(self) -> bool:
        """Autonomous work whose requested actions are all covered by `auto:` entries of the bound duty."""
        return self.autonomous and self.duty is not None and self.terms.authorised(self.actions)

    def external_unauthorised(self) -> bool:
        """Autonomous external effects that neither a contract `auto:` entry covers nor an undo window
        holds (with the window, the Policy Gate's high-risk conditions decide)."""
        return self.autonomous and self.external and not self.contract_authorises() and not self.undo_available


@dataclass(frozen=True, slots=True)
class Rule:
    code: str
    effect: RuleEffect
    when: Callable[[Facts], bool]
    why: Callable[[Facts], str]


def _duty(f: Facts) -> str:
    return repr(f.binding.duty_id)


def _pairs(matches: tuple[tuple[str, ScopeEntry], ...]) -> str:
    return "; ".join(f"{action!r} ({entry.text!r})" for action, entry in matches)


def _trigger(f: Facts) -> str:
    return repr(f.binding.trigger_id) if f.binding.trigger_id else "(the duty's default)"


# fmt: off
RULES: tuple[Rule, ...] = (
    # -- what the task names must exist and be live ------------------------------------------------------------
    Rule("goal_unknown", "block", lambda f: f.binding.problem == "goal_unknown", lambda f: f.binding.detail),
    Rule("goal_inactive", "block", lambda f: f.goal_status not in (None, GoalStatus.ACTIVE),
         lambda f: f"goal {f.binding.goal_id!r} is {f.goal_status}; only active goals start work"),
    Rule("duty_unknown", "block", lambda f: f.binding.problem == "duty_unknown", lambda f: f.binding.detail),
    Rule("duty_inactive", "block", lambda f: f.duty_status not in (None, DutyStatus.ACTIVE),
         lambda f: f"duty {_duty(f)} is {f.duty_status}; only active duties run"),
    Rule("trigger_unknown", "block", lambda f: f.binding.problem == "trigger_unknown", lambda f: f.binding.detail),
    Rule("trigger_ambiguous", "block", lambda f: f.binding.problem == "trigger_ambiguous", lambda f: f.binding.detail),
    Rule("scope_blocked", "block", lambda f: bool(f.scope("blocked")),
         lambda f: f"the contract of duty {_duty(f)} forbids {_pairs(f.scope('blocked'))}"),
    # -- how far the task may go: read-only postures ------------------------------------------------------------
    Rule("trust_zero_conversation", "degraded", lambda f: f.trust_level == 0 and f.conversational,
         lambda f: "tenant trust level 0: the conversation may only read and compute"),
    Rule("trust_zero", "proposal_only", lambda f: f.trust_level == 0 and not f.conversational,
         lambda f: f"tenant trust level 0: {f.source_type} work may only prepare proposals"),
    Rule("trust_below_effects", "proposal_only", lambda f: bool(f.effects_above_trust()),
         lambda f: f"requested effects {list(f.effects_above_trust())} need a higher trust level than the "
                   f"tenant's {f.trust_level}: proposals only"),
    Rule("posture_propose", "proposal_only", lambda f: f.binding.posture == "propose",
         lambda f: f"duty {_duty(f)} has posture 'propose' for trigger {_trigger(f)}: proposals only"),
    Rule("posture_draft", "proposal_only", lambda f: f.binding.posture == "draft",
         lambda f: f"duty {_duty(f)} has posture 'draft' for trigger {_trigger(f)}: drafts only, "
                   "nothing is sent or changed"),
    Rule("no_mandate", "proposal_only", lambda f: f.autonomous and f.duty is None,
         lambda f: f"{f.source_type} work bound to no duty has no mandate to act: proposals only"),
    Rule("scope_suggest", "proposal_only", lambda f: bool(f.scope("suggest")),
         lambda f: f"the contract of duty {_duty(f)} lets it only suggest {_pairs(f.scope('suggest'))}"),
    # -- what needs a person's confirmation first ---------------------------------------------------------------
    Rule("approval_required", "gate", lambda f: f.duty is not None and f.terms.approval_required,
         lambda f: f"the contract of duty {_duty(f)} requires approval for every run"),
    Rule("approval_required_for", "gate",
         lambda f: f.duty is not None and bool(f.terms.approval_for(f.actions)),
         lambda f: f"the contract of duty {_duty(f)} requires approval for {list(f.terms.approval_for(f.actions))}"),
    Rule("scope_confirm", "gate", lambda f: bool(f.scope("confirm")),
         lambda f: f"the contract of duty {_duty(f)} says to confirm {_pairs(f.scope('confirm'))}: "
                   "irreversible work is never silent"),
    Rule("sensor_requires_approval", "gate", lambda f: f.sensor_requires_approval,
         lambda f: f"sensor {f.sensor_id!r} requires approval before its facts start work"),
    Rule("autonomous_irreversible", "gate", lambda f: f.external_unauthorised(),
         lambda f: f"{f.source_type} work asks for external effects that no 'auto' entry of a duty contract "
                   "covers: irreversible work is never silent"),
)
# fmt: on


def decide(facts: Facts) -> GovernanceDecision:
    """The table's decision before any approval is considered; `policy_sources` is left empty."""
    reasons: list[Reason] = []
    blocked = gated = False
    posture: Posture = "normal"
    for rule in RULES:
        if not rule.when(facts):
            continue
        reasons.append(Reason(rule.code, rule.why(facts)))
        if rule.effect == "block":
            blocked = True
        elif rule.effect == "gate":
            gated = True
        elif _POSTURE_RANK[rule.effect] > _POSTURE_RANK[posture]:
            posture = rule.effect
    read_only = posture != "normal"
    risk, reversibility = classify(facts, read_only=read_only)
    if gated and read_only and not blocked:
        reasons.append(
            Reason("gate_moot", f"posture {posture} lets the run only read and compute, so nothing needs confirming")
        )
    action: Action = "blocked" if blocked else "gated" if gated and not read_only else "auto"
    if action == "auto":
        reasons += _notes(facts, read_only)
    if not reasons:
        reasons.append(Reason("default", f"no rule restricts {facts.source_type} work at trust {facts.trust_level}"))
    if action != "auto":
        posture = "proposal_only"  # fail-safe for work that must not run yet
    return GovernanceDecision(action, posture, risk, reversibility, tuple(reasons))


def classify(facts: Facts, *, read_only: bool) -> tuple[RiskTier, Reversibility]:
    """Risk and reversibility of what the run may do: only what its posture lets through counts."""
    if read_only:
        return "low", "reversible"
    if facts.scope("confirm"):
        return "high", "irreversible"
    if facts.effects is None:
        return "medium", "undo_window"  # undeclared is not low; each tool call is still checked
    if facts.external:
        held = facts.contract_authorises() or (facts.autonomous and facts.undo_available)
        return ("high", "undo_window") if held else ("high", "irreversible")
    if facts.effects & _SIDE_EFFECTS:
        return "medium", "undo_window"
    return "low", "reversible"


def _notes(facts: Facts, read_only: bool) -> list[Reason]:
    if read_only or not facts.external:
        return []
    if facts.interactive:
        return [
            Reason(
                "requester_present",
                "external effects asked for by the person in the conversation; "
                "each tool that requires approval still asks",
            )
        ]
    return [
        Reason(
            "contract_authorised",
            f"the contract of duty {_duty(facts)} authorises {list(facts.actions)} with an 'auto' entry",
        )
    ]


def apply_approval(decision: GovernanceDecision, granted: bool, reason: Reason) -> GovernanceDecision:
    """Gated + a valid approval -> auto under posture gated_execute; otherwise only the reason is added."""
    reasons = (*decision.reasons, reason)
    if granted and decision.action == "gated":
        return replace(decision, action="auto", posture="gated_execute", reasons=reasons)
    return replace(decision, reasons=reasons)
