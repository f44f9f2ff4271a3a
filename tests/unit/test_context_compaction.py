"""Progressive compaction in order (trim -> prune -> summarise), tool-call pairs kept whole, and
the reactive overflow recovery. Summaries through the real model are in tests/integration."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from genworker.llm.errors import ContextOverflowError, ProviderError
from genworker.memory.models import MemoryItem
from genworker.worker.context import (
    CompactionStep,
    ContextWindowConfig,
    ManagedContext,
    SegmentName,
    SegmentQuotas,
    build_managed_context,
    compact_for_overflow,
    count_tokens,
    run_with_overflow_retry,
)
from genworker.worker.context.compaction import SUMMARY_PREFIX, split_turns, trimmed_tool_outputs
from genworker.workspace.models import Contact, PersonaSpec
from genworker.workspace.snapshot import Worker

pytestmark = pytest.mark.anyio

Message = dict[str, Any]


def make_worker(contacts: Sequence[Contact] = ()) -> Worker:
    persona = PersonaSpec.model_validate({"identity": {"name": "Ada", "worker_id": "ada", "role": "analyst"}})
    return Worker("acme", "ada", persona, "Be useful.", {}, {}, {}, (), {c.person_id: c for c in contacts}, None, {})


def fixed_config(budget: int, **fields: Any) -> ContextWindowConfig:
    quotas = SegmentQuotas(system_identity=300, constraints_rules=300, contacts=200, memory=200, task=300, history=0.1)
    return ContextWindowConfig(total_tokens=budget + 500, reserve_for_output=500, quotas=quotas, **fields)


def tool_turn(i: int, output_words: int = 1_500, calls: int = 1) -> list[Message]:
    ids = [f"call_{i}_{k}" for k in range(calls)]
    request = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": i})}}
            for cid in ids
        ],
    }
    replies = [{"role": "tool", "tool_call_id": cid, "content": f"result {i} " + "data " * output_words} for cid in ids]
    return [
        {"role": "user", "content": f"question {i}"},
        request,
        *replies,
        {"role": "assistant", "content": f"answer {i}"},
    ]


def tool_history(turns: int, **kwargs: Any) -> list[Message]:
    return [m for i in range(turns) for m in tool_turn(i, **kwargs)]


async def build(history: Sequence[Message], budget: int, **fields: Any) -> ManagedContext:
    return await build_managed_context(make_worker(), "the task", history, config=fixed_config(budget, **fields))


async def uncompacted_total(history: Sequence[Message]) -> int:
    return (await build(history, 1_000_000)).total_tokens


def assert_pairs_intact(history: Sequence[Mapping[str, Any]]) -> None:
    pending: set[str] = set()
    for message in history:
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending, f"tool reply without its call: {message['tool_call_id']}"
            pending.discard(message["tool_call_id"])
        else:
            assert not pending, f"tool calls without replies: {pending}"
            pending = {c["id"] for c in message.get("tool_calls") or ()}
    assert not pending
    assert not history or history[0]["role"] in ("user", "system")


async def test_nothing_happens_when_it_fits() -> None:
    history = tool_history(3)
    ctx = await build(history, await uncompacted_total(history))
    assert ctx.steps == () and ctx.compaction == ()
    assert ctx.history == tuple(history)


async def test_step_a_trims_the_oldest_tool_outputs_and_stops_once_it_fits() -> None:
    history = tool_history(4)
    budget = await uncompacted_total(history) - 200
    ctx = await build(history, budget)
    assert ctx.steps == (CompactionStep.TRIM_TOOL_OUTPUTS,)
    outputs = [m["content"] for m in ctx.history if m["role"] == "tool"]
    assert "tokens of tool output trimmed" in outputs[0]
    assert count_tokens(outputs[0]) <= ctx.config.tool_output_max_tokens
    assert outputs[1:] == [m["content"] for m in history if m["role"] == "tool"][1:]
    (entry,) = ctx.compaction
    assert entry.tokens_before > budget >= entry.tokens_after == ctx.total_tokens
    assert ctx.fits and len(ctx.history) == len(history)


async def test_step_b_prunes_oldest_turns_after_trimming_all_outputs() -> None:
    history = tool_history(8)
    baseline = await build(history, 1_000_000)
    trimmed, _ = trimmed_tool_outputs(baseline.history, baseline.config.tool_output_max_tokens)
    all_trimmed = dataclasses.replace(baseline, history=trimmed).total_tokens
    ctx = await build(history, all_trimmed - 100)
    assert ctx.steps == (CompactionStep.TRIM_TOOL_OUTPUTS, CompactionStep.PRUNE_HISTORY)
    assert all("trimmed" in m["content"] for m in ctx.history if m["role"] == "tool")
    assert ctx.history[0] == {"role": "user", "content": "question 1"}  # one turn was enough
    assert ctx.fits and ctx.summary is None
    assert "dropped the 1 oldest turns, kept 7" in ctx.compaction[1].detail


async def test_prune_alone_when_there_are_no_long_outputs() -> None:
    history = tool_history(60, output_words=10)
    ctx = await build(history, await uncompacted_total(history) - 100)
    assert ctx.steps == (CompactionStep.PRUNE_HISTORY,)
    assert ctx.fits


async def test_pruning_keeps_recent_turns_then_without_a_model_drops_down_to_summary_keep_turns() -> None:
    history = tool_history(6)
    ctx = await build(history, 2_000, keep_recent_turns=4, summary_keep_turns=1)
    assert ctx.steps == (CompactionStep.TRIM_TOOL_OUTPUTS, CompactionStep.PRUNE_HISTORY)
    trim, prune, fallback = ctx.compaction
    assert "dropped the 2 oldest turns, kept 4" in prune.detail
    assert fallback.step == CompactionStep.PRUNE_HISTORY
    assert fallback.detail == "no summariser given: dropped 3 more turns, kept 1"
    assert [m["content"] for m in ctx.history if m["role"] == "user"] == ["question 5"]
    assert trim.tokens_before > prune.tokens_before > fallback.tokens_before > fallback.tokens_after
    assert ctx.summary is None and ctx.fits


@pytest.mark.parametrize("budget", [1_500, 2_500, 4_000, 6_000, 9_000, 14_000])
async def test_tool_calls_and_replies_are_never_split(budget: int) -> None:
    history: list[Message] = []
    for i in range(6):
        turn = tool_turn(i, output_words=700 + 300 * i, calls=1 + i % 3)
        history += turn[:-1] + tool_turn(100 + i, output_words=50, calls=2)[1:]  # two tool rounds in one turn
    for keep in (1, 2, 4):
        ctx = await build(history, budget, keep_recent_turns=keep, summary_keep_turns=min(keep, 1))
        assert ctx.steps
        assert_pairs_intact(ctx.history)
        smaller = compact_for_overflow(ctx)
        assert_pairs_intact(smaller.history)


def test_turns_start_at_user_messages() -> None:
    history = [{"role": "system", "content": "note"}, *tool_turn(0), *tool_turn(1)]
    turns = split_turns(history)
    assert [len(t) for t in turns] == [1, 4, 4]
    assert [t[0]["role"] for t in turns] == ["system", "user", "user"]


# -- reactive recovery ----------------------------------------------------------------


async def test_overflow_compaction_halves_the_context_and_keeps_the_last_turn() -> None:
    history = tool_history(6)
    ctx = await build(history, 1_000_000)
    smaller = compact_for_overflow(ctx)
    assert smaller.total_tokens <= ctx.total_tokens * ctx.config.overflow_shrink
    assert smaller.steps == (CompactionStep.OVERFLOW_RECOVERY,)
    assert smaller.history[-1] == {"role": "assistant", "content": "answer 5"}
    limit = ctx.config.overflow_tool_output_max_tokens
    assert all(count_tokens(m["content"]) <= limit for m in smaller.history if m["role"] == "tool")
    assert "trimmed 6 tool outputs to 200 tokens" in smaller.compaction[-1].detail


async def test_overflow_compaction_keeps_the_summary_note() -> None:
    ctx = await build(tool_history(4), 1_000_000)
    note = {"role": "system", "content": f"{SUMMARY_PREFIX} (3 turns):\nearlier facts"}
    ctx = dataclasses.replace(ctx, history=(note, *ctx.history), summary="earlier facts")
    smaller = compact_for_overflow(ctx)
    assert smaller.history[0] == note
    assert smaller.summary == "earlier facts"


async def test_overflow_compaction_leaves_out_memory_and_contacts_when_history_is_not_enough() -> None:
    contacts = [Contact(person_id=f"p{i}", name=f"Person {i}", notes="buys a lot " * 5) for i in range(20)]
    memory = [MemoryItem(f"fact {i} " * 10) for i in range(20)]
    ctx = await build_managed_context(
        make_worker(contacts), "t", tool_turn(0, 10), memory=memory, config=fixed_config(10_000)
    )
    smaller = compact_for_overflow(ctx)
    assert smaller.segment(SegmentName.MEMORY).text == ""
    assert smaller.segment(SegmentName.MEMORY).omitted == len(memory)
    assert "left out memory" in smaller.compaction[-1].detail
    assert smaller.total_tokens < ctx.total_tokens


async def test_retry_once_on_overflow_with_a_smaller_context() -> None:
    ctx = await build(tool_history(6), 1_000_000)
    seen: list[ManagedContext] = []

    async def call(context: ManagedContext) -> str:
        seen.append(context)
        if len(seen) == 1:
            raise ContextOverflowError("maximum context length exceeded")
        return "ok"

    assert await run_with_overflow_retry(call, ctx) == "ok"
    assert seen[0] is ctx
    assert seen[1].total_tokens < ctx.total_tokens
    assert seen[1].steps[-1] == CompactionStep.OVERFLOW_RECOVERY


async def test_second_overflow_is_raised() -> None:
    ctx = await build(tool_history(6), 1_000_000)
    calls = 0

    async def call(context: ManagedContext) -> str:
        nonlocal calls
        calls += 1
        raise ContextOverflowError(f"too long #{calls}")

    with pytest.raises(ContextOverflowError, match="too long #2"):
        await run_with_overflow_retry(call, ctx)
    assert calls == 2


async def test_other_errors_and_uncompactable_contexts_are_not_retried() -> None:
    calls: list[ManagedContext] = []

    async def failing(context: ManagedContext) -> str:
        calls.append(context)
        raise ProviderError("bad_request", "nope")

    with pytest.raises(ProviderError, match="nope"):
        await run_with_overflow_retry(failing, await build(tool_history(2), 1_000_000))
    assert len(calls) == 1

    async def overflowing(context: ManagedContext) -> str:
        calls.append(context)
        raise ContextOverflowError("too long")

    bare = await build([], 1_000_000)  # nothing left to cut
    with pytest.raises(ContextOverflowError):
        await run_with_overflow_retry(overflowing, bare)
    assert len(calls) == 2
