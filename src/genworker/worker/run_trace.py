"""What the router tells a run's trace (kept for the run view: genworker.streaming.trace): the
context the engine was given, as plain data, and every event the run emits; the trace is closed
(written) before the run's RouteDone goes out, so whoever reads the run right after sees it."""

from __future__ import annotations

from typing import Any, Protocol

from genworker.engine.events import EngineEvent
from genworker.worker.context.models import ManagedContext, SegmentName
from genworker.worker.routing import RouteAccepted, RouteDone, RouteEmit, RouterEvent

__all__ = ["RunTracer", "RunTraces", "context_report", "traced"]


class RunTracer(Protocol):
    def context(self, report: dict[str, Any], secrets: tuple[str, ...]) -> None: ...

    def record(self, event: EngineEvent) -> None: ...

    async def close(self) -> None:
        """Write the trace; once (a second close does nothing), never raising."""


class RunTraces(Protocol):
    def start(self, tenant_id: str, worker_id: str, run_id: str, thread_id: str) -> RunTracer: ...


def context_report(context: ManagedContext) -> dict[str, Any]:
    """Each segment's tokens and quota (history's: what the others left it), what it holds and left
    out, and the compaction that made the context fit."""
    segments = {s.name: s for s in context.segments}
    shown = []
    for name, usage in context.stats.items():
        segment = segments.get(name)
        shown.append(
            {
                "name": name.value,
                "tokens": usage.tokens,
                "quota": usage.quota,
                "items": len(context.history) if name is SegmentName.HISTORY else segment.items if segment else 0,
                "omitted": segment.omitted if segment else 0,
                "truncated": segment.truncated if segment else False,
            }
        )
    return {
        "budget": context.budget,
        "total_tokens": context.total_tokens,
        "segments": shown,
        "compaction": [
            {"step": r.step.value, "tokens_before": r.tokens_before, "tokens_after": r.tokens_after, "detail": r.detail}
            for r in context.compaction
        ],
        "summarised": context.summary is not None,
    }


def traced(emit: RouteEmit, tracer: RunTracer | None) -> RouteEmit:
    """`emit`, with each engine event recorded first and the trace written before RouteDone."""
    if tracer is None:
        return emit

    async def recording(event: RouterEvent) -> None:
        if isinstance(event, RouteDone):
            await tracer.close()
        elif not isinstance(event, RouteAccepted):
            tracer.record(event)
        await emit(event)

    return recording
