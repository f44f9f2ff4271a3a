"""`make bench` part 2: per-turn ReAct engine overhead against bare LiteLLM calls.

One "turn pair" = the model asks for one tool call, the tool runs, the model answers.
Ours: EngineDispatcher -> ReactLoop -> LLMClient -> LiteLLM Router, tool through the
ToolPipeline (audit to memory, schema validation, policy). Baseline, same process, same
local model server answering instantly: the same two streamed `Router.acompletion` calls
in a loop and a direct call of the tool function. Target: ratio <= 1.15.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from genworker.engine.base import EngineDeps, EngineRequest
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.llm.intent import Tier
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.tools.audit import MemoryAuditSink
from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.skill import SkillLevel, SkillSpec
from genworker.workspace.snapshot import Skill, frozen_map

TARGET = 1.15
RESULTS = Path(__file__).resolve().parent / "results" / "engine.json"
# The same request options LLMClient sends (usage in the stream feeds the call record).
SAME_KWARGS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}, "timeout": 60.0}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": False,
            },
        },
    }
]


@function_tool(effect=Effect.COMPUTE)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def plain_add(a: int, b: int) -> int:
    return a + b


def script(server: ScriptedModelServer, turns: int) -> None:
    for _ in range(turns):
        server.expect(Reply(tool_calls=(ToolCallReply("add", {"a": 2, "b": 3}),)), Reply("The answer is 5."))


async def ours(llm: LLMClient, pipeline: ToolPipeline, scope: ToolScope, skill: Skill) -> None:
    async def emit(event: EngineEvent) -> None:
        return None

    result = await EngineDispatcher(EngineDeps(llm, pipeline)).run(EngineRequest("bench", skill, "2+3?", scope), emit)
    assert result.status == "completed", result


async def baseline(router: Any, group: str) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "2+3?"}]
    calls: dict[int, dict[str, str]] = {}
    response = await router.acompletion(model=group, messages=messages, tools=TOOLS, **SAME_KWARGS)
    async for chunk in response:
        for delta_call in chunk.choices[0].delta.tool_calls or () if chunk.choices else ():
            slot = calls.setdefault(delta_call.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = delta_call.id or slot["id"]
            slot["name"] = (delta_call.function.name if delta_call.function else None) or slot["name"]
            slot["arguments"] += (delta_call.function.arguments if delta_call.function else None) or ""
    call = calls[0]
    result = await plain_add(**json.loads(call["arguments"]))
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call["id"], "content": str(result)},
    ]
    text = ""
    response = await router.acompletion(model=group, messages=messages, tools=TOOLS, **SAME_KWARGS)
    async for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == "The answer is 5."


async def measure(turns: int, rounds: int) -> dict[str, Any]:
    with ScriptedModelServer() as server, tempfile.TemporaryDirectory() as tmp:
        env = {
            "GENWORKER_LLM_MODEL": "openai/bench",
            "GENWORKER_LLM_API_BASE": server.base_url,
            "GENWORKER_LLM_API_KEY": "k",
        }
        llm = LLMClient(load_model_config(load_settings(Path(tmp), env)))
        from litellm.router import Router  # loaded by the client above

        router = Router(model_list=[dict(m) for m in llm.config.model_list], num_retries=0, disable_cooldowns=True)
        group = llm.config.tier_groups[Tier.STANDARD]  # what a chat turn's calls go to
        pipeline = ToolPipeline([add], audit=MemoryAuditSink())
        scope = ToolScope("bench", "w", "bench", Path(tmp), trust_level=2)
        spec = SkillSpec.model_validate({"name": "bench", "description": "d"})
        skill = Skill(spec, SkillLevel.SYSTEM, "bench", "", frozen_map({}))
        script(server, 20)  # warm-up
        for _ in range(10):
            await ours(llm, pipeline, scope, skill)
            await baseline(router, group)
        samples: dict[str, list[float]] = {"ours": [], "baseline": []}
        for round_no in range(rounds):
            order = [("ours", ours, (llm, pipeline, scope, skill)), ("baseline", baseline, (router, group))]
            if round_no % 2:
                order.reverse()
            for name, fn, args in order:
                script(server, turns)
                started = time.perf_counter()
                for _ in range(turns):
                    await fn(*args)  # type: ignore[operator]
                samples[name].append((time.perf_counter() - started) / turns * 1000)
        server.assert_done()
    ours_ms = statistics.median(samples["ours"])
    base_ms = statistics.median(samples["baseline"])
    return {
        "turns_per_round": turns,
        "rounds": rounds,
        "ours_ms": samples["ours"],
        "baseline_ms": samples["baseline"],
        "ours_median_ms": ours_ms,
        "baseline_median_ms": base_ms,
        "ratio": ours_ms / base_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=40, help="turn pairs per timed round")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.turns, args.rounds))
    verdict = "ok" if result["ratio"] <= TARGET else "MISSED"
    print(f"ReAct turn pair (tool call + final answer), {args.rounds} rounds x {args.turns}")
    print(f"  ours (engine + pipeline)   {result['ours_median_ms']:8.2f} ms per pair (median)")
    print(f"  baseline (2 bare calls)    {result['baseline_median_ms']:8.2f} ms per pair (median)")
    print(f"  ratio                      {result['ratio']:8.3f}x   target <= {TARGET}x {verdict}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
