"""Reactive recovery: when the provider still says the prompt is too long, compact harder
(no model call) and retry once.

Our token count is an estimate in cl100k; a provider that counts differently can overflow a
context we thought fit. The stronger compaction aims below `overflow_shrink` of the failed size.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from genworker.llm.errors import ContextOverflowError
from genworker.worker.context.compaction import (
    SUMMARY_PREFIX,
    flatten,
    record,
    split_turns,
    trimmed_tool_outputs,
)
from genworker.worker.context.models import CompactionStep, ManagedContext, Message, SegmentName

__all__ = ["compact_for_overflow", "run_with_overflow_retry"]

log = logging.getLogger("genworker.context")

T = TypeVar("T")

_DROPPABLE = (SegmentName.MEMORY, SegmentName.CONTACTS)  # least needed first


def _pinned_summary(context: ManagedContext) -> tuple[Message, ...]:
    head = context.history[:1]
    if context.summary is not None and head and str(head[0].get("content", "")).startswith(SUMMARY_PREFIX):
        return head
    return ()


def compact_for_overflow(context: ManagedContext) -> ManagedContext:
    """Cut every tool output short, drop old turns (the summary note stays), then memory and
    contacts, then the remaining turns, until the context is below `overflow_shrink` of its size."""
    config = context.config
    target = int(context.total_tokens * config.overflow_shrink)
    actions: list[str] = []
    history, trimmed = trimmed_tool_outputs(context.history, config.overflow_tool_output_max_tokens)
    if trimmed:
        actions.append(f"trimmed {trimmed} tool outputs to {config.overflow_tool_output_max_tokens} tokens")
    pinned = _pinned_summary(context)
    turns = split_turns(history[len(pinned) :])
    current = dataclasses.replace(context, history=(*pinned, *flatten(turns)))
    dropped = 0
    while current.total_tokens > target and len(turns) > 1:
        turns.pop(0)
        dropped += 1
        current = dataclasses.replace(current, history=(*pinned, *flatten(turns)))
    for name in _DROPPABLE:
        if current.total_tokens <= target:
            break
        current = _without(current, name)
        actions.append(f"left out {name.value}")
    if current.total_tokens > target and turns:
        dropped += len(turns)
        current = dataclasses.replace(current, history=pinned)
    if dropped:
        actions.append(f"dropped {dropped} turns")
    return record(context, current, CompactionStep.OVERFLOW_RECOVERY, "; ".join(actions) or "nothing left to cut")


def _without(context: ManagedContext, name: SegmentName) -> ManagedContext:
    segments = tuple(
        dataclasses.replace(s, text="", items=0, omitted=s.omitted + s.items) if s.name == name else s
        for s in context.segments
    )
    return dataclasses.replace(context, segments=segments)


async def run_with_overflow_retry(call: Callable[[ManagedContext], Awaitable[T]], context: ManagedContext) -> T:
    """`call(context)`; on ContextOverflowError compact once more and retry once, else re-raise."""
    try:
        return await call(context)
    except ContextOverflowError as exc:
        smaller = compact_for_overflow(context)
        if smaller.total_tokens >= context.total_tokens:
            raise
        log.warning(
            "context overflow at %d tokens, retrying once at %d: %s", context.total_tokens, smaller.total_tokens, exc
        )
    return await call(smaller)
