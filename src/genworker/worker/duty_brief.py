"""What a run gets from its execution depth, and what a duty run is told beyond its action.

- `depth_budget`: the tenant's `execution_depths` entry for the run's depth (model tier, rounds,
  token budget), for the engine. Work bound to no duty runs at `standard`.
- `duty_brief`: a system-prompt section for a duty run — its title, the trigger that fired (with its
  description), the execution depth, the quality criteria and the escalation rule; the shape its
  result must have (`contract.output_schema`) and where the runtime delivers it (`delivery`, so the
  run does not send it itself); at `deep` the root-cause analysis the run owes, at `quick` a
  reminder to keep it short. The action itself is the task text.
"""

from __future__ import annotations

import json

from genworker.engine.base import DepthBudget
from genworker.llm.intent import Tier
from genworker.workspace.models import DutySpec, Tenant
from genworker.workspace.models.depth import ExecutionDepth

__all__ = ["depth_budget", "duty_brief"]

_DEEP = (
    "Root-cause analysis (deep run):",
    "- Find the root cause of every problem or anomaly you report, not only its symptoms.",
    "- Lay out the contributing factors and the evidence for each.",
    "- Propose what would prevent it from happening again.",
    "- Record the investigation step by step, so someone can follow and check it.",
)
_QUICK = "Quick run: give the essential result in as few steps as possible; leave deeper analysis out."


def depth_budget(tenant: Tenant, depth: ExecutionDepth) -> DepthBudget:
    budget = tenant.execution_depths.budget(depth)
    return DepthBudget(depth, Tier(budget.tier), budget.max_rounds, budget.token_budget)


def duty_brief(duty: DutySpec | None, trigger_id: str | None, depth: ExecutionDepth) -> str:
    """The duty's section of the system prompt; empty without a duty."""
    if duty is None:
        return ""
    lines = [f"## Duty: {duty.title}"]
    trigger = next((t for t in duty.triggers if t.id == trigger_id), None)
    if trigger is not None:
        lines.append(f"Trigger: {trigger.type} ({trigger.description or trigger.id})")
    lines.append(f"Execution depth: {depth}")
    if duty.quality_criteria:
        lines += ["", "Quality criteria:", *(f"{i}. {c}" for i, c in enumerate(duty.quality_criteria, 1))]
    if duty.escalation is not None:
        lines += ["", f"Escalate to {duty.escalation.target} when: {duty.escalation.condition}"]
    schema = duty.contract.output_schema if duty.contract is not None else {}
    if schema:
        shape = json.dumps(schema, ensure_ascii=False, default=dict)
        lines += ["", f"Your final answer is the duty's result and must conform to this JSON Schema: {shape}"]
    if duty.delivery:
        places = "; ".join(t.describe() for t in duty.delivery)
        lines += ["", f"The runtime delivers the result to: {places}. Do not send it yourself."]
    if depth == "deep":
        lines += ["", *_DEEP]
    elif depth == "quick":
        lines += ["", _QUICK]
    return "\n".join(lines)
