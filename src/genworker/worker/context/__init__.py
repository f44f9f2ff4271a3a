"""Context management: assemble a worker's context under a token budget and compact it progressively."""

from genworker.worker.context.assembler import build_managed_context, check_thread
from genworker.worker.context.errors import ContextError, ThreadIsolationError
from genworker.worker.context.models import (
    CompactionRecord,
    CompactionStep,
    ContextSegment,
    ContextWindowConfig,
    ManagedContext,
    SegmentName,
    SegmentQuotas,
    SegmentUsage,
)
from genworker.worker.context.recovery import compact_for_overflow, run_with_overflow_retry
from genworker.worker.context.tokens import count_tokens

__all__ = [
    "CompactionRecord",
    "CompactionStep",
    "ContextError",
    "ContextSegment",
    "ContextWindowConfig",
    "ManagedContext",
    "SegmentName",
    "SegmentQuotas",
    "SegmentUsage",
    "ThreadIsolationError",
    "build_managed_context",
    "check_thread",
    "compact_for_overflow",
    "count_tokens",
    "run_with_overflow_retry",
]
