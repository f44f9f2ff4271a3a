"""The execution depth inside the engines: the tier of ReAct turns and of workflow llm steps, the rounds
cap of autonomous steps; condition judgements keep their own (fast) tier. Real LiteLLM to the scripted
model server, one model name per tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from genworker.engine.base import DepthBudget, EngineDeps, EngineRequest, RunResult
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.llm.intent import Tier
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.skill import SkillLevel, SkillSpec, instruction_blocks
from genworker.workspace.snapshot import Skill, frozen_map

pytestmark = pytest.mark.anyio

BODY = "## instructions.explore\nLook around.\n\n## instructions.report\nReport.\n"


@function_tool(effect=Effect.COMPUTE)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def hybrid(steps: list[dict[str, Any]]) -> Skill:
    settings = {"strategy": {"mode": "hybrid", "max_turns": 10, "steps": steps}}
    spec = SkillSpec.model_validate({"name": "s", "description": "d", "metadata": {"genworker": settings}})
    return Skill(spec, SkillLevel.WORKER, "skills/s/SKILL.md", BODY, frozen_map(instruction_blocks(BODY)))


async def run(tmp_path: Path, server: ScriptedModelServer, skill: Skill, budget: DepthBudget) -> RunResult:
    env = {
        f"GENWORKER_LLM_{tier}_{key}": value
        for tier in ("FAST", "STANDARD", "STRONG")
        for key, value in (("MODEL", f"openai/{tier.lower()}-model"), ("API_BASE", server.base_url), ("API_KEY", "k"))
    }
    llm = LLMClient(load_model_config(load_settings(tmp_path, env)))
    scope = ToolScope("acme", "w", "run-1", tmp_path, trust_level=2)

    async def emit(event: EngineEvent) -> None:
        return None

    req = EngineRequest("run-1", skill, "do it", scope, budget=budget)
    return await EngineDispatcher(EngineDeps(llm, ToolPipeline([add]))).run(req, emit)


async def test_a_deep_hybrid_run_uses_the_strong_tier_except_for_conditions(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        Reply("yes"), Reply(tool_calls=(ToolCallReply("add", {"a": 1, "b": 2}),)), Reply("3"), Reply("ok")
    )
    steps = [
        {"id": "check", "kind": "condition", "condition": "the task is clear"},
        {"id": "explore", "kind": "autonomous", "instructions": "explore"},
        {"id": "write", "kind": "llm", "instructions": "report"},
    ]
    result = await run(tmp_path, model_server, hybrid(steps), DepthBudget("deep", Tier.STRONG, 20, 600_000))
    assert (result.status, result.output) == ("completed", "ok")
    assert [r["model"] for r in model_server.requests] == ["fast-model", "strong-model", "strong-model", "strong-model"]


async def test_a_quick_autonomous_step_stops_at_the_depths_rounds(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(tool_calls=(ToolCallReply("add", {"a": 1, "b": 2}),)))
    steps = [{"id": "explore", "kind": "autonomous", "instructions": "explore"}]
    result = await run(tmp_path, model_server, hybrid(steps), DepthBudget("quick", Tier.FAST, 1, 40_000))
    assert result.status == "max_turns_exceeded"
    assert "stopped after 1 turns (the quick depth's limit)" in result.output
    assert [r["model"] for r in model_server.requests] == ["fast-model"]
