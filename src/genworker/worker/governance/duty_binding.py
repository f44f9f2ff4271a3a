"""Which duty a task serves: an explicit duty id, else the provenance of the trigger that fired.

Order: explicit `duty_id`; a `duty` source naming the duty in `source_id`; a `trigger_id` that
exactly one duty of the worker declares; the goal's `primary_duty_id`. Chat binds no duty unless
asked to. A binding that names something the worker does not have carries a `problem`; the
decision table blocks on it. A closed or deprecated duty is still bound (its contract is
recorded) and the table blocks on its status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from genworker.worker.governance.models import GovernanceInput
from genworker.workspace.models import DutySpec, Goal
from genworker.workspace.models.duty import DutyPosture, ExecutionDepth

__all__ = ["BindingProblem", "BoundVia", "DutyBinding", "DutyBindingResolver"]

BindingProblem = Literal["goal_unknown", "duty_unknown", "trigger_unknown", "trigger_ambiguous"]
BoundVia = Literal["explicit", "source", "trigger", "goal", "none"]


@dataclass(frozen=True, slots=True)
class DutyBinding:
    duty: DutySpec | None = None
    trigger_id: str | None = None
    depth: ExecutionDepth | None = None  # the duty's execution depth for this trigger
    posture: DutyPosture | None = None  # how far the duty may act for this trigger
    goal: Goal | None = None
    via: BoundVia = "none"
    problem: BindingProblem | None = None
    detail: str = ""  # the sentence explaining `problem`

    @property
    def duty_id(self) -> str | None:
        return self.duty.duty_id if self.duty is not None else None

    @property
    def goal_id(self) -> str | None:
        return self.goal.goal_id if self.goal is not None else None


class DutyBindingResolver:
    def resolve(self, inp: GovernanceInput) -> DutyBinding:
        goal = None
        if inp.goal_id is not None:
            goal = inp.worker.goals.get(inp.goal_id)
            if goal is None:
                return DutyBinding(problem="goal_unknown", detail=f"goal {inp.goal_id!r} is not a goal of {_who(inp)}")
        if inp.duty_id is not None:
            return self._bind(inp, goal, inp.duty_id, "explicit")
        if inp.source_type == "duty" and inp.source_id:
            return self._bind(inp, goal, inp.source_id, "source")
        if inp.trigger_id is not None:
            return self._by_trigger(inp, goal, inp.trigger_id)
        if goal is not None and goal.primary_duty_id is not None:
            return self._bind(inp, goal, goal.primary_duty_id, "goal")
        return DutyBinding(goal=goal)

    def _by_trigger(self, inp: GovernanceInput, goal: Goal | None, trigger_id: str) -> DutyBinding:
        owners = sorted(d.duty_id for d in inp.worker.duties.values() if trigger_id in {t.id for t in d.triggers})
        if len(owners) == 1:
            return self._bind(inp, goal, owners[0], "trigger")
        if owners:
            detail = f"trigger {trigger_id!r} is declared by several duties {owners}; name the duty"
            return DutyBinding(goal=goal, trigger_id=trigger_id, problem="trigger_ambiguous", detail=detail)
        detail = f"no duty of {_who(inp)} declares trigger {trigger_id!r}"
        return DutyBinding(goal=goal, trigger_id=trigger_id, problem="trigger_unknown", detail=detail)

    @staticmethod
    def _bind(inp: GovernanceInput, goal: Goal | None, duty_id: str, via: BoundVia) -> DutyBinding:
        duty = inp.worker.duties.get(duty_id)
        trigger_id = inp.trigger_id
        if duty is None:
            detail = f"duty {duty_id!r} is not a duty of {_who(inp)}"
            return DutyBinding(goal=goal, trigger_id=trigger_id, via=via, problem="duty_unknown", detail=detail)
        if trigger_id is not None and trigger_id not in {t.id for t in duty.triggers}:
            detail = f"duty {duty_id!r} has no trigger {trigger_id!r}"
            return DutyBinding(duty, trigger_id, goal=goal, via=via, problem="trigger_unknown", detail=detail)
        depth, posture = duty.execution_policy.depth_for(trigger_id), duty.posture.posture_for(trigger_id)
        return DutyBinding(duty, trigger_id, depth, posture, goal, via)


def _who(inp: GovernanceInput) -> str:
    return f"worker {inp.worker.tenant_id}/{inp.worker.worker_id}"
