"""Who may call what: pre-call hooks, the posture (governance) check, permissions, approval.

The same `policy_denial` / `posture_denial` decide what `ToolPipeline.visible()` shows and
what `execute()` allows, so a tool hidden from the model is also refused when called.
Specs here are *resolved*: their effect, risk and approval fields are already filled in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import fnmatchcase
from types import MappingProxyType

from genworker.tools.base import Effect, ToolSpec
from genworker.tools.context import Posture, ToolContext, ToolScope
from genworker.tools.middlewares.chain import CallNext, Hook, Middleware
from genworker.tools.outcomes import ToolDenied, ToolNeedsApproval, ToolOutcome

__all__ = [
    "READ_ONLY_POSTURES",
    "REQUIRES_TRUST_3",
    "SAFE_EFFECTS",
    "TRUST_REQUIRED",
    "approval",
    "governance",
    "matches_any",
    "permission",
    "policy_denial",
    "posture_denial",
    "required_trust",
    "run_hooks",
]

log = logging.getLogger("genworker.tools")

REQUIRES_TRUST_3 = "requires_trust_3"
TRUST_REQUIRED: Mapping[Effect, int] = MappingProxyType(
    {Effect.READ: 0, Effect.COMPUTE: 0, Effect.WRITE: 1, Effect.EXTERNAL: 2, Effect.DELEGATE: 2}
)
READ_ONLY_POSTURES: frozenset[Posture] = frozenset({"proposal_only", "degraded"})
SAFE_EFFECTS = frozenset({Effect.READ, Effect.COMPUTE})


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """Policy lists hold tool names or fnmatch patterns such as `github__*`."""
    return any(name == p or fnmatchcase(name, p) for p in patterns)


def required_trust(spec: ToolSpec) -> int:
    needed = TRUST_REQUIRED[spec.effect or Effect.EXTERNAL]
    return 3 if REQUIRES_TRUST_3 in spec.tags else needed


def policy_denial(scope: ToolScope, spec: ToolSpec) -> ToolDenied | None:
    """Tenant denied list, then the worker's whitelist / blacklist, then the trust level."""
    name = spec.name
    if matches_any(name, scope.tenant_denied_tools):
        return ToolDenied("denied_by_tenant", f"tool {name} is disabled for tenant {scope.tenant_id}")
    if scope.worker_allowed_tools is not None and not matches_any(name, scope.worker_allowed_tools):
        return ToolDenied("denied_by_worker", f"tool {name} is not in worker {scope.worker_id}'s allowed_tools")
    if matches_any(name, scope.worker_denied_tools):
        return ToolDenied("denied_by_worker", f"tool {name} is in worker {scope.worker_id}'s denied_tools")
    needed = required_trust(spec)
    if scope.trust_level < needed:
        effect = (spec.effect or Effect.EXTERNAL).value
        return ToolDenied(
            "trust_level", f"tool {name} ({effect}) needs trust level {needed}; tenant has {scope.trust_level}"
        )
    return None


def posture_denial(scope: ToolScope, spec: ToolSpec) -> ToolDenied | None:
    effect = spec.effect or Effect.EXTERNAL
    if scope.posture in READ_ONLY_POSTURES and effect not in SAFE_EFFECTS:
        return ToolDenied(
            "posture", f"tool {spec.name} has effect {effect.value}; posture {scope.posture} allows only read/compute"
        )
    return None


def run_hooks(hooks: Sequence[Hook]) -> Middleware:
    """Middleware running pre-call hooks in order; the first denial wins. A failing hook denies."""

    async def hooks_middleware(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        for hook in hooks:
            try:
                denied = await hook(ctx)
            except Exception as exc:
                log.warning("tool hook %r failed for %s", hook, ctx.spec.name, exc_info=True)
                return ToolDenied("hook", f"a pre-call check failed: {type(exc).__name__}: {exc}")
            if denied is not None:
                return denied
        return await call_next(ctx)

    return hooks_middleware


async def governance(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
    """Posture vs effect again at call time: a tool added after `visible()` cannot slip through."""
    return posture_denial(ctx.scope, ctx.spec) or await call_next(ctx)


async def permission(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
    return policy_denial(ctx.scope, ctx.spec) or await call_next(ctx)


async def approval(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
    spec, call = ctx.spec, ctx.call
    if spec.requires_approval and call.id not in ctx.scope.approved_call_ids:
        effect = (spec.effect or Effect.EXTERNAL).value
        return ToolNeedsApproval(
            f"tool {spec.name} ({effect}, risk {spec.risk_level.value}) needs a person's approval of call {call.id}"
        )
    return await call_next(ctx)
