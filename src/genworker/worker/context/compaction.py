"""Progressive compaction of an over-budget context, in order, stopping as soon as it fits:
(a) trim long tool outputs, (b) prune the oldest turns, (c) summarise older history in one
fast-tier call and put the summary in front as a system note.

Only history is compacted here; the other segments are already within their quotas. A turn
is a user message and everything up to the next one, so pruning never separates an assistant
tool call from its tool replies.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from genworker.llm.client import LLMClient
from genworker.llm.errors import LLMError
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.worker.context.models import (
    CompactionRecord,
    CompactionStep,
    ContextWindowConfig,
    ManagedContext,
    Message,
)
from genworker.worker.context.tokens import count_tokens, message_tokens, truncate_tokens

__all__ = [
    "SUMMARY_PREFIX",
    "Turn",
    "compact",
    "flatten",
    "prune_history",
    "record",
    "split_turns",
    "summarize_history",
    "trim_tool_outputs",
    "trimmed_tool_outputs",
]

log = logging.getLogger("genworker.context")

SUMMARY_PREFIX = "Summary of the earlier conversation"
_TRANSCRIPT_MESSAGE_TOKENS = 300  # each message's share of the summariser's transcript
_SUMMARY_INSTRUCTIONS = (
    "You compress conversation history for a digital worker. Summarise the conversation below in at most "
    "{max_tokens} tokens. Keep facts, decisions, commitments, open questions, names, numbers and tool results "
    "that later turns may rely on; drop pleasantries. Write in the conversation's language. Reply with the "
    "summary only."
)

Turn = tuple[Message, ...]


def split_turns(history: Iterable[Message]) -> list[Turn]:
    """Turns in order; messages before the first user message form a turn of their own."""
    turns: list[Turn] = []
    current: list[Message] = []
    for message in history:
        if message.get("role") == "user" and current:
            turns.append(tuple(current))
            current = []
        current.append(message)
    if current:
        turns.append(tuple(current))
    return turns


def flatten(turns: Iterable[Turn]) -> tuple[Message, ...]:
    return tuple(m for turn in turns for m in turn)


def record(old: ManagedContext, new: ManagedContext, step: CompactionStep, detail: str) -> ManagedContext:
    entry = CompactionRecord(step, old.total_tokens, new.total_tokens, detail)
    log.info("context compaction %s: %d -> %d tokens (%s)", step.value, entry.tokens_before, entry.tokens_after, detail)
    return dataclasses.replace(new, compaction=(*old.compaction, entry))


async def compact(context: ManagedContext, llm: LLMClient | None) -> ManagedContext:
    if context.fits:
        return context
    context = trim_tool_outputs(context)
    if context.fits:
        return context
    context, pruned = prune_history(context)
    if context.fits:
        return context
    return await summarize_history(context, pruned, llm)


def trimmed_tool_outputs(
    history: Sequence[Message], max_tokens: int, excess: int | None = None
) -> tuple[tuple[Message, ...], int]:
    """Tool outputs cut to `max_tokens` (head and tail), oldest first; stop once `excess` tokens are saved."""
    out = list(history)
    trimmed = 0
    for index, message in enumerate(out):
        if excess is not None and excess <= 0:
            break
        content = message.get("content")
        if message.get("role") != "tool" or not isinstance(content, str) or count_tokens(content) <= max_tokens:
            continue
        cut = {**message, "content": truncate_tokens(content, max_tokens, keep="middle", what="tool output")}
        if excess is not None:
            excess -= message_tokens(message) - message_tokens(cut)
        out[index] = cut
        trimmed += 1
    return tuple(out), trimmed


def trim_tool_outputs(context: ManagedContext) -> ManagedContext:
    """Step (a)."""
    limit = context.config.tool_output_max_tokens
    history, trimmed = trimmed_tool_outputs(context.history, limit, context.total_tokens - context.budget)
    if not trimmed:
        return context
    new = dataclasses.replace(context, history=history)
    return record(context, new, CompactionStep.TRIM_TOOL_OUTPUTS, f"trimmed {trimmed} tool outputs to {limit} tokens")


def prune_history(context: ManagedContext) -> tuple[ManagedContext, tuple[Turn, ...]]:
    """Step (b): drop the oldest turns while over budget, keeping `keep_recent_turns`."""
    turns = split_turns(context.history)
    excess = context.total_tokens - context.budget
    pruned: list[Turn] = []
    while excess > 0 and len(turns) > context.config.keep_recent_turns:
        turn = turns.pop(0)
        pruned.append(turn)
        excess -= sum(message_tokens(m) for m in turn)
    if not pruned:
        return context, ()
    new = dataclasses.replace(context, history=flatten(turns))
    detail = f"dropped the {len(pruned)} oldest turns, kept {len(turns)}"
    return record(context, new, CompactionStep.PRUNE_HISTORY, detail), tuple(pruned)


async def summarize_history(context: ManagedContext, pruned: Sequence[Turn], llm: LLMClient | None) -> ManagedContext:
    """Step (c): the pruned turns and all but the last `summary_keep_turns` become one summary note.

    Skipped when every remaining turn is to be kept: the note would only make the context larger.
    """
    config = context.config
    turns = split_turns(context.history)
    split = max(len(turns) - config.summary_keep_turns, 0)
    if split == 0:  # a summary would only add to what is kept
        return context
    older, kept = [*pruned, *turns[:split]], turns[split:]
    if llm is None:
        return _drop_older(context, kept, split, "no summariser given")
    try:
        summary = await _summarise(llm, older, config)
    except LLMError as exc:
        log.warning("history summary failed, dropping older turns instead: %s", exc)
        return _drop_older(context, kept, split, f"summary failed: {exc}")
    note = {"role": "system", "content": f"{SUMMARY_PREFIX} ({len(older)} turns):\n{summary}"}
    new = dataclasses.replace(context, history=(note, *flatten(kept)), summary=summary)
    detail = f"summarised {len(older)} turns ({len(pruned)} pruned before) into {count_tokens(summary)} tokens"
    return record(context, new, CompactionStep.SUMMARIZE_HISTORY, detail)


def _drop_older(context: ManagedContext, kept: Sequence[Turn], dropped: int, why: str) -> ManagedContext:
    if not dropped:
        return context
    new = dataclasses.replace(context, history=flatten(kept))
    return record(context, new, CompactionStep.PRUNE_HISTORY, f"{why}: dropped {dropped} more turns, kept {len(kept)}")


async def _summarise(llm: LLMClient, turns: Sequence[Turn], config: ContextWindowConfig) -> str:
    transcript = "\n".join(_transcript_line(m) for turn in turns for m in turn)
    transcript = truncate_tokens(transcript, config.summary_input_max_tokens, keep="middle", what="conversation")
    messages = [
        {"role": "system", "content": _SUMMARY_INSTRUCTIONS.format(max_tokens=config.summary_max_tokens)},
        {"role": "user", "content": transcript},
    ]
    completion = await llm.complete(LLMCallIntent(Purpose.SUMMARIZE), messages)
    text = completion.text.strip()
    if not text:
        raise LLMError("the summariser returned no text")
    return truncate_tokens(text, config.summary_max_tokens, what="summary")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return "" if content is None else str(content)


def _short(text: str) -> str:
    return truncate_tokens(text.strip(), _TRANSCRIPT_MESSAGE_TOKENS, keep="middle")


def _transcript_line(message: Message) -> str:
    role = str(message.get("role", ""))
    content = _short(_text(message.get("content")))
    if role == "tool":
        return f"Tool {message.get('name') or message.get('tool_call_id', '')} returned: {content}"
    lines = [f"{role.capitalize() if role != 'system' else 'Note'}: {content}"] if content else []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        lines.append(f"Assistant called {function.get('name', '')}({_short(str(function.get('arguments', '')))})")
    return "\n".join(lines)
