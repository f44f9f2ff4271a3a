"""CommitCheck: the Conflict Arbiter's commit-time check as a tool middleware, the innermost extra
middleware of every worker's pipeline (right before the timeout and the tool itself).

A call whose tool declares a `resource` (tool_effects.yml, docs/conflicts.md) is one effect of the
plan its run is: resource key and operation filled from the arguments, the expected version from
the argument the declaration names. The arbiter then lets it run (under the key's lock), or answers
instead of it:

| verdict | what the model gets |
|---|---|
| merged | the call completes without running: the same change was already made |
| replan | `ToolFailed("conflict")`: the resource changed; read it again and re-plan |
| escalated | `ToolNeedsApproval`: a person decides (the run waits; its confirmation names the conflict) |

A template may also name `{worker_id}` (the calling worker's). Calls of tools without a resource,
and calls whose key names a missing argument, pass straight on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import assert_never

from genworker.autonomy.conflicts.arbiter import Committed, ConflictArbiter, Escalated, Merged, Replan
from genworker.autonomy.conflicts.models import EffectRecord, Reversibility
from genworker.tools.base import Effect, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.effects import EffectResolver
from genworker.tools.middlewares import CallNext
from genworker.tools.outcomes import ToolCompleted, ToolFailed, ToolNeedsApproval, ToolOutcome
from genworker.workspace.models.effects import ResourceDecl

__all__ = ["CommitCheck", "conflict_marker"]

_DEFAULT_REVERSIBILITY: Mapping[Effect, Reversibility] = {
    Effect.EXTERNAL: "undo_window",
    Effect.DELEGATE: "undo_window",
}


def conflict_marker(conflict_id: str) -> str:
    """How an escalation's approval reason names its case (the brief keeps one card per conflict)."""
    return f"conflict {conflict_id}"


class CommitCheck:
    def __init__(self, arbiter: ConflictArbiter, effects: EffectResolver) -> None:
        self.arbiter = arbiter
        self.effects = effects

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        resolved = self.effects.resolve(ctx.spec, ctx.scope)
        effect = _effect(ctx, resolved.resource, resolved.effect)
        if effect is None:
            return await call_next(ctx)
        version_key = resolved.resource.version_result if resolved.resource is not None else None

        def done(outcome: ToolOutcome) -> tuple[bool, str | None]:
            if not isinstance(outcome, ToolCompleted) or outcome.result.is_error:
                return False, None
            data = outcome.result.data
            version = data.get(version_key) if version_key and isinstance(data, Mapping) else None
            return True, None if version in (None, "") else str(version)

        approved = ctx.call.id in ctx.scope.approved_call_ids
        verdict = await self.arbiter.commit(effect, lambda: call_next(ctx), done, approved=approved)
        match verdict:
            case Committed(result=outcome):
                return outcome
            case Merged(case=case, version=version):
                text = (
                    f"Already done: plan {case.plan_a_id} made the same change ({effect.operation}) to "
                    f"{effect.resource_key}, now at version {version}; not run again "
                    f"({conflict_marker(case.conflict_id)})."
                )
                return ToolCompleted(ToolResult(text, data={"merged_into": case.plan_a_id, "version": version}))
            case Replan(case=case):
                return ToolFailed("conflict", _replan_text(effect, case.detail, case.conflict_id, case.status))
            case Escalated(case=case):
                return ToolNeedsApproval(
                    f"{conflict_marker(case.conflict_id)} on {effect.resource_key}: {case.detail}. "
                    f"Approve to let {ctx.spec.name} ({effect.operation}) proceed, or reject to drop it."
                )
            case _:
                assert_never(verdict)


def _effect(ctx: ToolContext, resource: ResourceDecl | None, effect: Effect) -> EffectRecord | None:
    if resource is None:
        return None
    scope = ctx.scope
    filled = resource.fill(ctx.spec.name, {"worker_id": scope.worker_id, **ctx.call.arguments})
    if filled is None:
        return None
    key, operation, version = filled
    reversibility = resource.reversibility or _DEFAULT_REVERSIBILITY.get(effect, "reversible")
    return EffectRecord(scope.run_id, scope.tenant_id, scope.worker_id, key, operation, version, reversibility)


def _replan_text(effect: EffectRecord, detail: str, conflict_id: str, status: str) -> str:
    if status == "dropped":
        return f"{effect.operation} on {effect.resource_key} was dropped by a person ({conflict_marker(conflict_id)})."
    return (
        f"Not done: {detail}. Read {effect.resource_key} again and decide from its current state "
        f"({conflict_marker(conflict_id)})."
    )
