"""The outermost middleware: exactly one audit record per call, whatever happens inside."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, assert_never

from genworker.observability.metrics import record_tool_call
from genworker.tools.audit import AuditRecord, AuditSink, Decision, OutcomeKind
from genworker.tools.base import Effect
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.middlewares.redaction import redactor_for
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, ToolOutcome

__all__ = ["MAX_AUDIT_STRING", "Auditing", "audit_record", "redacted_arguments"]

log = logging.getLogger("genworker.tools")

MAX_AUDIT_STRING = 1000


class Auditing:
    """Records every call to `sink` (none: nothing is recorded) and turns a bug inside the
    chain into ToolFailed("error") so `execute` never raises."""

    def __init__(self, sink: AuditSink | None) -> None:
        self.sink = sink

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        started = time.perf_counter()
        try:
            outcome: ToolOutcome = await call_next(ctx)
        except asyncio.CancelledError:
            await self.record(ctx, None, _ms_since(started))
            raise
        except Exception as exc:
            log.exception("tool pipeline failed on %s", ctx.spec.name)
            outcome = ToolFailed("error", f"internal error in the tool pipeline: {type(exc).__name__}")
        await self.record(ctx, outcome, _ms_since(started))
        return outcome

    async def record(self, ctx: ToolContext, outcome: ToolOutcome | None, duration_ms: float) -> None:
        """Write the record for one call; `outcome=None` means it was cancelled."""
        _, kind, _, _, is_error = _classify(outcome)
        record_tool_call(ctx.spec.name, "error" if is_error else kind)
        if self.sink is None:
            return
        try:
            await self.sink.write(audit_record(ctx, outcome, duration_ms))
        except Exception:
            log.exception("audit sink %r failed; record for call %s lost", self.sink, ctx.call.id)


def audit_record(ctx: ToolContext, outcome: ToolOutcome | None, duration_ms: float) -> AuditRecord:
    scope, call, spec = ctx.scope, ctx.call, ctx.spec
    redactor = redactor_for(scope.secrets)
    decision, kind, code, detail, is_error = _classify(outcome)
    return AuditRecord(
        ts=datetime.now(UTC).isoformat(timespec="milliseconds"),
        tenant_id=scope.tenant_id,
        worker_id=scope.worker_id,
        run_id=scope.run_id,
        call_id=call.id,
        tool=call.name,
        caller=ctx.caller,
        effect=(spec.effect or Effect.EXTERNAL).value,
        risk_level=spec.risk_level.value,
        args=redacted_arguments(scope.secrets, call.arguments),
        decision=decision,
        outcome=kind,
        code=code,
        detail=_clip(redactor.text(detail)),
        duration_ms=round(duration_ms, 3),
        approved=spec.requires_approval and call.id in scope.approved_call_ids,
        is_error=is_error,
    )


def redacted_arguments(secrets: tuple[str, ...], arguments: Any) -> Any:
    """A tool call's arguments as the audit keeps them: secrets redacted, long strings clipped."""
    redactor = redactor_for(secrets)
    return _clip(redactor.value(dict(arguments) if isinstance(arguments, Mapping) else arguments))


def _classify(outcome: ToolOutcome | None) -> tuple[Decision, OutcomeKind, str | None, str, bool]:
    match outcome:
        case None:
            return "cancelled", "cancelled", None, "", False
        case ToolCompleted(result=result):
            return "allow", "completed", None, result.content if result.is_error else "", result.is_error
        case ToolDenied(code=code, reason=reason):
            return "deny", "denied", code, reason, False
        case ToolNeedsApproval(reason=reason):
            return "ask", "needs_approval", None, reason, False
        case ToolFailed(code=code, error=error):
            decision: Decision = "reject" if code == "invalid_arguments" else "deny" if code == "conflict" else "allow"
            return decision, "failed", code, error, False
        case _:
            assert_never(outcome)


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_AUDIT_STRING:
        return f"{value[:MAX_AUDIT_STRING]}…(+{len(value) - MAX_AUDIT_STRING} chars)"
    if isinstance(value, dict):
        return {k: _clip(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v) for v in value]
    return value


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
