"""Context compaction against the real LiteLLM client and the scripted model server: the one
fast-tier summary call, its failure, and the reactive retry on a provider's context overflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from genworker.llm.client import Completion, LLMClient, recording
from genworker.llm.config_source import load_model_config
from genworker.llm.errors import ContextOverflowError
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer
from genworker.worker.context import (
    CompactionStep,
    ContextWindowConfig,
    ManagedContext,
    SegmentQuotas,
    build_managed_context,
    count_tokens,
    run_with_overflow_retry,
)
from genworker.workspace.models import PersonaSpec
from genworker.workspace.snapshot import Worker

pytestmark = pytest.mark.anyio

OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens. "
    "Please reduce the length of the messages."
)
SUMMARY = "Ada looked up q0 to q4 for the user; every lookup returned data rows; nothing is pending."


def client(tmp_path: Path, server: ScriptedModelServer) -> LLMClient:
    env = {
        "GENWORKER_LLM_MODEL": "openai/scripted",
        "GENWORKER_LLM_FAST_MODEL": "openai/scripted-fast",
        "GENWORKER_LLM_API_BASE": server.base_url,
        "GENWORKER_LLM_API_KEY": "k",
    }
    return LLMClient(load_model_config(load_settings(tmp_path, env)))


def worker() -> Worker:
    persona = PersonaSpec.model_validate({"identity": {"name": "Ada", "worker_id": "ada", "role": "analyst"}})
    return Worker("acme", "ada", persona, "Be useful.", {}, {}, {}, (), {}, None, {})


def config(budget: int) -> ContextWindowConfig:
    quotas = SegmentQuotas(system_identity=300, constraints_rules=300, contacts=200, memory=200, task=300, history=0.1)
    return ContextWindowConfig(
        total_tokens=budget + 500, reserve_for_output=500, quotas=quotas, keep_recent_turns=4, summary_keep_turns=1
    )


def history(turns: int, output_words: int = 1_500) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(turns):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"q": i})},
        }
        out += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i} " + "data " * output_words},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    return out


async def test_history_is_summarised_once_at_the_fast_tier(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    def check(body: dict[str, Any]) -> None:
        system, user = body["messages"]
        assert "Summarise the conversation below in at most 500 tokens" in system["content"]
        transcript = user["content"]
        for i in range(5):  # the two pruned turns and the three older kept ones
            assert f"User: question {i}" in transcript
            assert f"Assistant: answer {i}" in transcript
        assert 'Assistant called lookup({"q": 0})' in transcript
        assert "Tool call_0 returned: result 0 data" in transcript
        assert "question 5" not in transcript
        assert count_tokens(transcript) <= 8_000

    model_server.expect(Reply(SUMMARY, check=check))
    with recording() as calls:
        ctx = await build_managed_context(
            worker(), "next", history(6), config=config(2_000), llm=client(tmp_path, model_server)
        )
    assert ctx.steps == (
        CompactionStep.TRIM_TOOL_OUTPUTS,
        CompactionStep.PRUNE_HISTORY,
        CompactionStep.SUMMARIZE_HISTORY,
    )
    assert len(model_server.requests) == 1
    assert model_server.requests[0]["model"] == "scripted-fast"
    assert [(c.purpose, c.tier) for c in calls] == [("summarize", "fast")]
    assert ctx.summary == SUMMARY
    assert ctx.history[0] == {"role": "system", "content": f"Summary of the earlier conversation (5 turns):\n{SUMMARY}"}
    assert [m["content"] for m in ctx.history if m["role"] == "user"] == ["question 5"]
    assert ctx.history[-1] == {"role": "assistant", "content": "answer 5"}
    assert ctx.compaction[-1].detail == f"summarised 5 turns (2 pruned before) into {count_tokens(SUMMARY)} tokens"
    assert ctx.fits
    sent = ctx.messages()
    assert sent[0]["role"] == "system" and sent[1]["content"].startswith("Summary of the earlier conversation")


async def test_no_model_call_when_pruning_is_enough(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    full = await build_managed_context(worker(), "next", history(30, 100), config=config(1_000_000))
    ctx = await build_managed_context(
        worker(), "next", history(30, 100), config=config(full.total_tokens - 50), llm=client(tmp_path, model_server)
    )
    assert ctx.steps == (CompactionStep.PRUNE_HISTORY,)
    tight = config(2_000).model_copy(update={"keep_recent_turns": 1})
    ctx = await build_managed_context(worker(), "next", history(6), config=tight, llm=client(tmp_path, model_server))
    assert ctx.steps == (CompactionStep.TRIM_TOOL_OUTPUTS, CompactionStep.PRUNE_HISTORY)  # nothing left to summarise
    assert ctx.summary is None
    assert model_server.requests == []


async def test_failed_summary_falls_back_to_dropping_older_turns(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Fail(500, "summariser down"))
    ctx = await build_managed_context(
        worker(), "next", history(6), config=config(2_000), llm=client(tmp_path, model_server)
    )
    assert ctx.steps == (CompactionStep.TRIM_TOOL_OUTPUTS, CompactionStep.PRUNE_HISTORY)
    assert ctx.compaction[-1].detail.startswith("summary failed: every model in the fallback chain failed")
    assert ctx.summary is None
    assert [m["content"] for m in ctx.history if m["role"] == "user"] == ["question 5"]
    assert model_server.requests[0]["model"] == "scripted-fast"


async def test_provider_overflow_is_retried_once_with_a_compacted_context(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    llm = client(tmp_path, model_server)
    ctx = await build_managed_context(worker(), "next", history(6), config=config(1_000_000), llm=llm)
    assert ctx.steps == ()
    model_server.expect(Fail(400, OVERFLOW), Reply("done"))

    async def call(context: ManagedContext) -> Completion:
        return await llm.complete(LLMCallIntent(Purpose.CHAT), context.messages())

    completion = await run_with_overflow_retry(call, ctx)
    assert completion.text == "done"
    first, second = (r["messages"] for r in model_server.requests)
    assert len(first) == len(ctx.messages())
    assert (first[0], first[-1]) == (ctx.messages()[0], ctx.messages()[-1])
    assert count_tokens(second) <= count_tokens(first) * ctx.config.overflow_shrink
    assert second[-2:] == [
        {"role": "assistant", "content": "answer 5"},
        {"role": "user", "content": "next"},
    ]


async def test_second_provider_overflow_is_raised(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    llm = client(tmp_path, model_server)
    ctx = await build_managed_context(worker(), "next", history(6), config=config(1_000_000), llm=llm)
    model_server.expect(Fail(400, OVERFLOW), Fail(400, OVERFLOW))

    async def call(context: ManagedContext) -> Completion:
        return await llm.complete(LLMCallIntent(Purpose.CHAT), context.messages())

    with pytest.raises(ContextOverflowError, match="maximum context length"):
        await run_with_overflow_retry(call, ctx)
    assert len(model_server.requests) == 2
