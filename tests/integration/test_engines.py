"""ReAct, Workflow and Hybrid engines: real LiteLLM to the scripted model server, real ToolPipeline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genworker.engine.base import EngineDeps, EngineRequest, RunResult
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import (
    ApprovalRequired,
    EngineEvent,
    RunError,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply
from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.skill import SkillLevel, SkillSpec, instruction_blocks
from genworker.workspace.snapshot import Skill, frozen_map

pytestmark = pytest.mark.anyio


@function_tool(effect=Effect.READ)
async def lookup(city: str) -> dict[str, Any]:
    """Look up a city's weather.

    Args:
        city: the city name
    """
    return {"city": city, "temp_c": 21}


@function_tool(effect=Effect.COMPUTE)
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@function_tool(effect=Effect.WRITE, requires_approval=True)
async def send_invoice(customer: str) -> str:
    """Send an invoice (needs a person's approval)."""
    return f"sent to {customer}"


BARRIER = {"a": asyncio.Event, "b": asyncio.Event}


def skill(
    mode: str = "autonomous", *, steps: list[dict[str, Any]] | None = None, body: str = "", **strategy: Any
) -> Skill:
    settings: dict[str, Any] = {"strategy": {"mode": mode, **strategy, **({"steps": steps} if steps else {})}}
    spec = SkillSpec.model_validate({"name": "test-skill", "description": "d", "metadata": {"genworker": settings}})
    return Skill(spec, SkillLevel.WORKER, "skills/test-skill/SKILL.md", body, frozen_map(instruction_blocks(body)))


class Harness:
    def __init__(self, tmp_path: Path, server: ScriptedModelServer, tools: list[Any]) -> None:
        env = {
            "GENWORKER_LLM_MODEL": "openai/scripted",
            "GENWORKER_LLM_API_BASE": server.base_url,
            "GENWORKER_LLM_API_KEY": "k",
        }
        self.llm = LLMClient(load_model_config(load_settings(tmp_path, env)))
        self.pipeline = ToolPipeline(tools)
        self.scope = ToolScope("acme", "w", "run-1", tmp_path, trust_level=2)
        self.events: list[EngineEvent] = []

    async def emit(self, event: EngineEvent) -> None:
        self.events.append(event)

    async def run(self, the_skill: Skill, task: str = "do it", **scope: Any) -> RunResult:
        from dataclasses import replace

        req = EngineRequest("run-1", the_skill, task, replace(self.scope, **scope), system="You are W.")
        return await EngineDispatcher(EngineDeps(self.llm, self.pipeline)).run(req, self.emit)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture
def harness(tmp_path: Path, model_server: ScriptedModelServer) -> Callable[..., Harness]:
    return lambda *tools: Harness(tmp_path, model_server, list(tools))


# -- ReAct ------------------------------------------------------------------------


async def test_react_tool_call_then_final_answer(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    def sees_tool_result(body: dict[str, Any]) -> None:
        tool_msg = body["messages"][-1]
        assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"]) == {"city": "Oslo", "temp_c": 21}

    model_server.expect(
        Reply("Let me check.", tool_calls=(ToolCallReply("lookup", {"city": "Oslo"}, "c1"),)),
        Reply("It is 21 degrees in Oslo.", check=sees_tool_result),
    )
    h = harness(lookup)
    result = await h.run(skill())
    assert (result.status, result.output, result.engine) == ("completed", "It is 21 degrees in Oslo.", "react")
    assert result.tool_calls == 1 and len(result.llm_calls) == 2
    assert model_server.requests[0]["tools"][0]["function"]["name"] == "lookup"
    assert model_server.requests[0]["messages"][0] == {"role": "system", "content": "You are W."}
    kinds = [type(e).__name__ for e in h.events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    assert (
        kinds.index("ToolCallStart")
        < kinds.index("ToolCallArgs")
        < kinds.index("ToolCallEnd")
        < kinds.index("ToolCallResult")
    )
    assert "".join(e.text for e in h.of(TextDelta)).endswith("It is 21 degrees in Oslo.")
    assert h.of(ToolCallResult)[0].outcome == "completed"


async def test_react_runs_parallel_tool_calls_concurrently(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}

    @function_tool(effect=Effect.READ)
    async def rendezvous(me: str, other: str) -> str:
        """Wait until the other call has started too (deadlocks if calls run one by one)."""
        started[me].set()
        await asyncio.wait_for(started[other].wait(), 10)
        return f"{me} met {other}"

    model_server.expect(
        Reply(
            tool_calls=(
                ToolCallReply("rendezvous", {"me": "a", "other": "b"}),
                ToolCallReply("rendezvous", {"me": "b", "other": "a"}),
            )
        ),
        Reply("both met"),
    )
    h = harness(rendezvous)
    result = await h.run(skill())
    assert result.status == "completed" and result.tool_calls == 2
    assert sorted(e.content for e in h.of(ToolCallResult)) == ["a met b", "b met a"]


async def test_react_max_turns_exceeded_is_a_clear_outcome(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(*(Reply(tool_calls=(ToolCallReply("add", {"a": 1, "b": i}),)) for i in range(2)))
    h = harness(add)
    result = await h.run(skill(max_turns=2))
    assert result.status == "max_turns_exceeded"
    assert h.of(RunFinished)[0].outcome == "max_turns_exceeded"


async def test_denied_and_invalid_calls_are_fed_back_to_the_model(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    def sees_errors(body: dict[str, Any]) -> None:
        replies = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        assert replies[0].startswith("[tool denied: denied_by_tenant]")
        assert replies[1].startswith("[tool failed: invalid_arguments]")

    model_server.expect(
        Reply(tool_calls=(ToolCallReply("lookup", {"city": "Rome"}), ToolCallReply("add", {"a": "one", "b": 2}))),
        Reply("I could not do that.", check=sees_errors),
    )
    h = harness(lookup, add)
    result = await h.run(skill(), tenant_denied_tools=frozenset({"lookup"}))
    assert result.status == "completed"
    assert [e.outcome for e in h.of(ToolCallResult)] == ["denied", "failed"]


async def test_tool_needing_approval_stops_the_run(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(tool_calls=(ToolCallReply("send_invoice", {"customer": "Globex"}, "inv1"),)))
    h = harness(send_invoice)
    result = await h.run(skill())
    assert result.status == "approval_required", (result.error_code, result.error)
    assert result.pending_approval is not None and result.pending_approval.arguments == {"customer": "Globex"}
    (approval,) = h.of(ApprovalRequired)
    assert approval.tool == "send_invoice" and approval.call_id == "inv1"


async def test_approval_checkpoint_resumes_the_loop_where_it_stopped(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    first_turn = (
        ToolCallReply("lookup", {"city": "Oslo"}, "l1"),
        ToolCallReply("send_invoice", {"customer": "G"}, "i1"),
    )
    model_server.expect(Reply(tool_calls=first_turn), Reply("invoice sent, Oslo is sunny"))
    h = harness(lookup, send_invoice)
    stopped = await h.run(skill())
    assert stopped.status == "approval_required"
    assistant, looked_up = stopped.checkpoint[-2:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["l1", "i1"]
    assert looked_up["tool_call_id"] == "l1"  # the other call's result is kept; the pending one is not answered
    approved = {"role": "tool", "tool_call_id": "i1", "content": "sent to G"}
    req = EngineRequest("run-2", skill(), "do it", h.scope, resume=(*stopped.checkpoint, approved))
    resumed = await EngineDispatcher(EngineDeps(h.llm, h.pipeline)).run(req, h.emit)
    assert resumed.status == "completed" and resumed.output == "invoice sent, Oslo is sunny"
    assert resumed.tool_calls == 0  # nothing before the interrupt is run again
    sent = model_server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert sent[2]["tool_calls"] == assistant["tool_calls"] and sent[3] == looked_up and sent[4] == approved


async def test_provider_failure_is_an_error_event_never_content(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Fail(500))  # one model for every tier: the whole chain fails at once
    h = harness()
    result = await h.run(skill())
    assert result.status == "failed" and result.error_code == "provider_error" and result.output == ""
    (error,) = h.of(RunError)
    assert error.code == "provider_error"
    assert not h.of(TextDelta) and not h.of(RunFinished)


async def test_no_model_configured_fails_the_run_with_the_file_to_edit(tmp_path: Path) -> None:
    llm = LLMClient(load_model_config(load_settings(tmp_path, {})))
    events: list[EngineEvent] = []

    async def emit(event: EngineEvent) -> None:
        events.append(event)

    req = EngineRequest("r", skill(), "hi", ToolScope("t", "w", "r", tmp_path))
    result = await EngineDispatcher(EngineDeps(llm, ToolPipeline())).run(req, emit)
    assert result.error_code == "model_not_configured"
    assert "config_local.env" in events[-1].message  # type: ignore[union-attr]


# -- Workflow and Hybrid --------------------------------------------------------------

BODY = """
## instructions.report
Write a one-line weather report.

## instructions.explore
Find anything else worth knowing.
"""


async def test_workflow_tool_steps_feed_each_other_without_any_model_call(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    steps = [
        {"id": "sum", "kind": "tool", "tool": "add", "arguments": {"a": 2, "b": 3}, "output": "total"},
        {"id": "again", "kind": "tool", "tool": "add", "arguments": {"a": "{{ total }}", "b": 10}, "output": "bigger"},
        {"id": "big", "kind": "condition", "condition": "bigger > 100"},
        {"id": "never", "kind": "tool", "tool": "add", "arguments": {"a": 0, "b": 0}},
        {"id": "weather", "kind": "tool", "tool": "lookup", "arguments": {"city": "Oslo"}, "output": "w"},
    ]
    h = harness(add, lookup)
    result = await h.run(skill("deterministic", steps=steps))
    assert result.status == "completed", result.error
    assert model_server.requests == []  # no step asked for the model
    assert result.step_outputs["total"] == 5 and result.step_outputs["bigger"] == 15
    assert [(e.step_id, e.status) for e in h.of(StepFinished)] == [
        ("sum", "completed"),
        ("again", "completed"),
        ("big", "completed"),
        ("never", "skipped"),
        ("weather", "completed"),
    ]
    assert json.loads(result.output) == {"city": "Oslo", "temp_c": 21}


async def test_workflow_llm_step_uses_its_instruction_block(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    def block_and_data(body: dict[str, Any]) -> None:
        assert "Write a one-line weather report." in body["messages"][0]["content"]
        assert '"temp_c": 21' in body["messages"][1]["content"]

    model_server.expect(Reply("Oslo: 21C, pleasant.", check=block_and_data))
    steps = [
        {"id": "weather", "kind": "tool", "tool": "lookup", "arguments": {"city": "{{ input }}"}, "output": "w"},
        {"id": "write", "kind": "llm", "instructions": "report", "output": "report"},
    ]
    h = harness(lookup)
    result = await h.run(skill("deterministic", steps=steps, body=BODY), task="Oslo")
    assert (result.status, result.output) == ("completed", "Oslo: 21C, pleasant.")
    assert [s.step_id for s in h.of(StepStarted)] == ["weather", "write"]


async def test_prose_condition_asks_the_model_and_on_false_stop(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("no"))
    steps = [
        {"id": "check", "kind": "condition", "condition": "the request mentions an invoice", "on_false": "stop"},
        {"id": "never", "kind": "tool", "tool": "add", "arguments": {"a": 1, "b": 1}},
    ]
    h = harness(add)
    result = await h.run(skill("deterministic", steps=steps))
    assert result.status == "condition_stopped"
    assert [s.step_id for s in h.of(StepStarted)] == ["check"]


async def test_hybrid_runs_an_autonomous_step_as_a_react_loop(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        Reply(tool_calls=(ToolCallReply("add", {"a": 20, "b": 1}),)),
        Reply("Found: 21"),
        Reply("Final: 21 in Oslo"),
    )
    steps = [
        {"id": "weather", "kind": "tool", "tool": "lookup", "arguments": {"city": "Oslo"}, "output": "w"},
        {"id": "explore", "kind": "autonomous", "instructions": "explore", "output": "notes"},
        {"id": "write", "kind": "llm", "instructions": "report"},
    ]
    h = harness(add, lookup)
    result = await h.run(skill("hybrid", steps=steps, body=BODY))
    assert (result.status, result.output, result.engine) == ("completed", "Final: 21 in Oslo", "hybrid")
    assert result.step_outputs["notes"] == "Found: 21"
    assert model_server.requests[0]["tools"]  # the autonomous step sees tools
    assert "tools" not in model_server.requests[2]  # the llm step does not


async def test_autonomous_step_needs_hybrid_mode(harness: Callable[..., Harness]) -> None:
    steps = [{"id": "explore", "kind": "autonomous", "instructions": "explore"}]
    h = harness()
    result = await h.run(skill("deterministic", steps=steps, body=BODY))
    assert result.status == "failed" and "need strategy mode 'hybrid'" in result.error


async def test_unavailable_mode_uses_the_declared_fallback_and_records_it(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("done the autonomous way"))
    graph = {"entry": "a", "nodes": [{"name": "a", "kind": "llm"}]}
    h = harness()
    result = await h.run(
        skill("langgraph", graph=graph, fallback={"condition": "graph mode unavailable", "mode": "autonomous"})
    )
    assert result.status == "completed" and result.engine == "react"
    reason = "declared graphs (entry/nodes/edges) do not run here yet: write the graph as a Python factory"
    assert result.fallback == {"from": "langgraph", "to": "autonomous", "reason": reason}
    assert h.of(RunStarted)[0].engine == "autonomous"


async def test_unavailable_mode_without_fallback_is_an_error(harness: Callable[..., Harness]) -> None:
    h = harness()
    result = await h.run(skill("langgraph", graph={"entry": "a", "nodes": [{"name": "a", "kind": "llm"}]}))
    assert result.error_code == "engine_unavailable" and h.of(RunError)


async def test_failed_workflow_step_falls_back_to_autonomous(
    harness: Callable[..., Harness], model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("handled autonomously"))
    steps = [{"id": "weather", "kind": "tool", "tool": "lookup", "arguments": {"city": "Oslo"}}]
    h = harness(lookup)
    result = await h.run(
        skill("deterministic", steps=steps, fallback={"condition": "a tool step fails", "mode": "autonomous"}),
        tenant_denied_tools=frozenset({"lookup"}),
    )
    assert (result.status, result.output) == ("completed", "handled autonomously")
    assert result.fallback["from"] == "deterministic" and "denied_by_tenant" in result.fallback["reason"]


async def test_events_cover_the_whole_vocabulary() -> None:
    # every event type is reachable from the tests above; this guards the public set
    names = {
        c.__name__
        for c in (
            RunStarted,
            RunFinished,
            RunError,
            TextDelta,
            ToolCallStart,
            ToolCallArgs,
            ToolCallEnd,
            ToolCallResult,
            StepStarted,
            StepFinished,
            ApprovalRequired,
        )
    }
    assert len(names) == 11
