"""Upstream genworker's `strategy.workflow` skills run here with upstream's meaning: real LiteLLM to
the scripted model server, real ToolPipeline.

`type: deterministic` = one model call offered the step's tools (forced when it lists one), its
calls run, retried per `retry`; `type: autonomous` = a ReAct loop of `max_rounds` turns over the
step's `tools`; `fallback: {condition: no_workflow}` = autonomous when there are no steps.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from genworker.engine.base import EngineDeps, EngineRequest, RunResult
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent, RunError, StepFinished, StepStarted, ToolCallResult
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.skill import SkillLevel, SkillSpec, instruction_blocks
from genworker.workspace.scan import Scope
from genworker.workspace.skills import load_skill
from genworker.workspace.snapshot import Skill, frozen_map

pytestmark = pytest.mark.anyio

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "compat" / "upstream_full"

QUERIES: list[str] = []


@function_tool(effect=Effect.READ)
async def sql_executor(query: str) -> str:
    """Run a read-only SQL query.

    Args:
        query: the SQL text
    """
    QUERIES.append(query)
    if "bad" in query:
        raise RuntimeError("syntax error near 'bad'")
    return "rows: 42"


@function_tool(effect=Effect.READ)
async def data_profiler(table: str) -> str:
    """Profile a table."""
    return f"{table}: 0.1% nulls"


@function_tool(effect=Effect.READ)
async def file_read(path: str) -> str:
    """Read a file."""
    return f"contents of {path}"


TOOLS = [sql_executor, data_profiler, file_read]


class Harness:
    def __init__(self, tmp_path: Path, server: ScriptedModelServer) -> None:
        env = {
            "GENWORKER_LLM_MODEL": "openai/scripted",
            "GENWORKER_LLM_API_BASE": server.base_url,
            "GENWORKER_LLM_API_KEY": "k",
        }
        self.llm = LLMClient(load_model_config(load_settings(tmp_path, env)))
        self.pipeline = ToolPipeline(TOOLS)
        self.scope = ToolScope("acme", "w", "run-1", tmp_path, trust_level=2)
        self.events: list[EngineEvent] = []
        self.root: Path | None = None  # where LangGraph skills' modules are found

    async def emit(self, event: EngineEvent) -> None:
        self.events.append(event)

    async def run(self, skill: Skill, task: str = "why did sales drop?", **scope: Any) -> RunResult:
        req = EngineRequest("run-1", skill, task, replace(self.scope, **scope), system="You are W.")
        dispatcher = EngineDispatcher(EngineDeps(self.llm, self.pipeline, workspace_root=self.root), retry_base_s=0.01)
        return await dispatcher.run(req, self.emit)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
def harness(tmp_path: Path, model_server: ScriptedModelServer) -> Harness:
    QUERIES.clear()
    return Harness(tmp_path, model_server)


def upstream_skill(front_matter: str, body: str = "## instructions.general\nHelp.\n") -> Skill:
    spec = SkillSpec.model_validate(yaml.safe_load(front_matter))
    return Skill(spec, SkillLevel.WORKER, "skills/x/SKILL.md", body, frozen_map(instruction_blocks(body)))


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


def system_of(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


async def test_the_corpus_hybrid_skill_runs_end_to_end(harness: Harness, model_server: ScriptedModelServer) -> None:
    skill, warnings = load_skill(Scope(CORPUS), CORPUS / "system" / "skills" / "report-hybrid", SkillLevel.SYSTEM)
    assert [i for i in warnings if i.severity != "note"] == []
    model_server.expect(
        # planning: autonomous, max_rounds 3, every tool
        Reply("Query sales by region for March."),
        # execution: deterministic, tools sql_executor + data_profiler; the first attempt fails
        Reply(tool_calls=(ToolCallReply("sql_executor", {"query": "select bad"}, "q1"),)),
        Reply(tool_calls=(ToolCallReply("sql_executor", {"query": "select region, sum(x)"}, "q2"),)),
        # summarization: autonomous over file_read only
        Reply("Sales fell in the north: 42 rows checked."),
    )
    result = await harness.run(skill)
    assert (result.status, result.engine) == ("completed", "hybrid"), result.error
    assert result.output == "Sales fell in the north: 42 rows checked."
    assert result.step_outputs["execution"] == "rows: 42"
    assert QUERIES == ["select bad", "select region, sum(x)"]

    planning, first, second, summary = model_server.requests
    assert "Decide which metrics and tables" in system_of(planning)
    assert "Recommended tools" in system_of(planning) and "sql_executor, data_profiler" in system_of(planning)
    assert set(offered(planning)) == {"sql_executor", "data_profiler", "file_read"}
    assert offered(first) == offered(second) == ["sql_executor", "data_profiler"]
    assert "tool_choice" not in first  # two tools listed: the model picks
    assert "Run the planned queries." in system_of(first)
    assert offered(summary) == ["file_read"]
    assert "Summarise the findings" in system_of(summary)
    assert [(e.step_id, e.status) for e in harness.of(StepFinished)] == [
        ("planning", "completed"),
        ("execution", "failed"),  # attempt 1 of 2
        ("execution", "completed"),
        ("summarization", "completed"),
    ]
    assert [s.step_id for s in harness.of(StepStarted)].count("execution") == 2
    assert result.tool_calls == 2


async def test_retry_gives_up_after_max_attempts(harness: Harness, model_server: ScriptedModelServer) -> None:
    skill = upstream_skill(
        """
name: x
metadata:
  genworker:
    strategy:
      mode: deterministic
      workflow:
        - {step: query, type: deterministic, tools: [sql_executor], retry: {max_attempts: 2, backoff: exponential}}
"""
    )
    model_server.expect(*(Reply(tool_calls=(ToolCallReply("sql_executor", {"query": f"bad {i}"}),)) for i in range(2)))
    result = await harness.run(skill)
    assert (result.status, result.error_code) == ("failed", "step_failed")
    assert "failed after 2 attempts" in result.error and "syntax error" in result.error
    assert QUERIES == ["bad 0", "bad 1"]
    # one listed tool is forced, as upstream's deterministic steps do
    assert model_server.requests[0]["tool_choice"] == {"type": "function", "function": {"name": "sql_executor"}}
    assert harness.of(RunError)[0].code == "step_failed"


async def test_autonomous_step_stops_at_max_rounds(harness: Harness, model_server: ScriptedModelServer) -> None:
    skill = upstream_skill(
        """
name: x
metadata:
  genworker:
    strategy:
      mode: hybrid
      workflow:
        - {step: explore, type: autonomous, max_rounds: 2, tools: [file_read]}
        - {step: never, type: deterministic}
"""
    )
    model_server.expect(*(Reply(tool_calls=(ToolCallReply("file_read", {"path": f"f{i}"}),)) for i in range(2)))
    result = await harness.run(skill)
    assert result.status == "max_turns_exceeded"
    assert len(model_server.requests) == 2
    assert [s.step_id for s in harness.of(StepStarted)] == ["explore"]


async def test_step_tools_are_a_scope_not_a_hint(harness: Harness, model_server: ScriptedModelServer) -> None:
    skill = upstream_skill(
        """
name: x
metadata:
  genworker:
    strategy:
      mode: hybrid
      workflow:
        - {step: read, type: autonomous, max_rounds: 3, tools: [file_read]}
"""
    )

    def denied_fed_back(body: dict[str, Any]) -> None:
        assert body["messages"][-1]["content"].startswith("[tool denied")

    model_server.expect(
        Reply(tool_calls=(ToolCallReply("sql_executor", {"query": "select 1"}),)),  # not offered to this step
        Reply("I may only read files.", check=denied_fed_back),
    )
    result = await harness.run(skill)
    assert result.status == "completed", result.error
    assert offered(model_server.requests[0]) == ["file_read"]
    assert QUERIES == []
    assert harness.of(ToolCallResult)[0].outcome == "denied"


async def test_deterministic_step_without_tools_is_offered_every_tool(
    harness: Harness, model_server: ScriptedModelServer
) -> None:
    skill = upstream_skill(
        """
name: x
metadata:
  genworker:
    strategy:
      mode: deterministic
      workflow:
        - {step: profile, type: autonomous, instruction_ref: profile}
""",
        body="## instructions.profile\nProfile the sales table.\n",
    )
    model_server.expect(Reply(tool_calls=(ToolCallReply("data_profiler", {"table": "sales"}),)))
    result = await harness.run(skill)
    assert (result.status, result.output) == ("completed", "sales: 0.1% nulls")  # mode deterministic: one call
    assert set(offered(model_server.requests[0])) == {"sql_executor", "data_profiler", "file_read"}
    assert "Profile the sales table." in system_of(model_server.requests[0])


async def test_no_workflow_falls_back_to_autonomous_only_without_steps(
    harness: Harness, model_server: ScriptedModelServer
) -> None:
    empty = upstream_skill(
        "name: x\nmetadata:\n  genworker:\n    strategy:\n      mode: hybrid\n"
        "      fallback: {condition: no_workflow, mode: autonomous}\n"
    )
    model_server.expect(Reply("answered autonomously"))
    result = await harness.run(empty)
    assert (result.status, result.engine, result.output) == ("completed", "react", "answered autonomously")
    assert result.fallback == {"from": "hybrid", "to": "autonomous", "reason": "strategy mode 'hybrid' has no steps"}

    failing = upstream_skill(
        "name: x\nmetadata:\n  genworker:\n    strategy:\n      mode: deterministic\n"
        "      fallback: {condition: no_workflow, mode: autonomous}\n"
        "      workflow:\n        - {step: q, type: deterministic, tools: [sql_executor]}\n"
    )
    model_server.expect(Reply(tool_calls=(ToolCallReply("sql_executor", {"query": "bad"}),)))
    result = await harness.run(failing)
    assert (result.status, result.error_code, dict(result.fallback)) == ("failed", "step_failed", {})


async def test_workflow_without_steps_or_fallback_fails_clearly(harness: Harness) -> None:
    result = await harness.run(upstream_skill("name: x\nmetadata:\n  genworker:\n    strategy:\n      mode: hybrid\n"))
    assert (result.status, result.error_code) == ("failed", "no_steps")
    assert "has no steps" in result.error


async def test_a_missing_instruction_block_uses_the_general_block(
    harness: Harness, model_server: ScriptedModelServer
) -> None:
    skill = upstream_skill(
        "name: x\nmetadata:\n  genworker:\n    strategy:\n      mode: deterministic\n"
        "      workflow:\n        - {step: write, type: deterministic, instruction_ref: nowhere, tools: [file_read]}\n",
        body="Write it up politely.\n",
    )
    model_server.expect(Reply("done"))
    result = await harness.run(skill)
    assert (result.status, result.output) == ("completed", "done")
    assert "Write it up politely." in system_of(model_server.requests[0])


async def test_upstream_planning_and_python_graph_skills_run(
    harness: Harness, model_server: ScriptedModelServer
) -> None:
    planner, _ = load_skill(
        Scope(CORPUS), CORPUS / "tenants" / "acme" / "skills" / "incident-planner", SkillLevel.TENANT
    )
    model_server.expect(
        Reply('{"nodes": [{"id": "check", "instruction": "Check the error rate", "tools": ["sql_executor"]}]}'),
        Reply("The error rate doubled at 14:00."),
    )
    result = await harness.run(planner)
    assert (result.status, result.engine, result.output) == (
        "completed",
        "planning",
        "The error rate doubled at 14:00.",
    )
    assert "Plan the investigation" in system_of(model_server.requests[0])

    graph, _ = load_skill(
        Scope(CORPUS), CORPUS / "tenants" / "acme" / "skills" / "triage_graph", SkillLevel.TENANT, trust_level=2
    )
    model_server.expect(Reply("Disk full on db-1; the on-call DBA owns it."))
    harness.root = CORPUS
    result = await harness.run(graph, task="ALERT: disk 98% on db-1")
    assert (result.status, result.engine) == ("completed", "langgraph")
    assert result.output == "Disk full on db-1; the on-call DBA owns it."
    assert "Summarise the triage result" in system_of(model_server.requests[-1])
    assert model_server.requests[-1]["messages"][-1]["content"] == "ALERT: disk 98% on db-1"

    model_server.expect(Reply("triaged without the graph"))
    result = await harness.run(graph, trust_level=1)  # the tenant may not run graph code: the fallback
    assert (result.status, result.engine) == ("completed", "react")
    assert "trust_level is 1 (it needs 2 or more)" in result.fallback["reason"]
