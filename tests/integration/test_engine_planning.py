"""The planning engine: real LiteLLM to the scripted model server, the real ToolPipeline, the plan
kept in a real run record (TaskLifecycle on a tmp workspace)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.engine.base import Continuation, DepthBudget, EngineDeps, EngineRequest, RunResult
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent, StepFinished, StepStarted
from genworker.engine.state import PlanNode, PlanRecord
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.llm.intent import Tier
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, When
from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.worker.engine_runs import RunEngineState, checkpoint_stores
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import RunRef, TaskManifest
from genworker.workspace.models.skill import SkillLevel, SkillSpec, instruction_blocks
from genworker.workspace.snapshot import Skill, frozen_map

pytestmark = pytest.mark.anyio

SENT: list[str] = []


@function_tool(effect=Effect.READ)
async def lookup(city: str) -> dict[str, Any]:
    """Look up a city's weather.

    Args:
        city: the city name
    """
    return {"city": city, "temp_c": 21 if city == "Oslo" else 25}


@function_tool(effect=Effect.EXTERNAL)
async def send_note(text: str) -> str:
    """Send a note to the team.

    Args:
        text: the note
    """
    SENT.append(text)
    return "sent"


@function_tool(effect=Effect.EXTERNAL, requires_approval=True, name="send_note")
async def send_note_gated(text: str) -> str:
    """Send a note to the team (a person approves each).

    Args:
        text: the note
    """
    SENT.append(text)
    return "sent"


def planning_skill(max_turns: int = 4) -> Skill:
    settings = {"strategy": {"mode": "planning", "max_turns": max_turns}}
    spec = SkillSpec.model_validate({"name": "planner", "description": "d", "metadata": {"genworker": settings}})
    body = "Compare the weather of cities."
    return Skill(spec, SkillLevel.WORKER, "skills/planner/SKILL.md", body, frozen_map(instruction_blocks(body)))


def plan(*nodes: dict[str, Any]) -> str:
    return json.dumps({"nodes": list(nodes)})


class Planner:
    def __init__(self, tmp_path: Path, server: ScriptedModelServer) -> None:
        env = {"GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": server.base_url}
        self.llm = LLMClient(load_model_config(load_settings(tmp_path, {**env, "GENWORKER_LLM_API_KEY": "k"})))
        self.root = tmp_path / "ws"
        self.tasks = TaskLifecycle(self.root)
        self.pipeline = ToolPipeline([lookup, send_note])
        self.events: list[EngineEvent] = []

    async def emit(self, event: EngineEvent) -> None:
        self.events.append(event)

    async def run(
        self, run_id: str, *, continuation: Continuation | None = None, budget: DepthBudget | None = None
    ) -> RunResult:
        manifest = TaskManifest(f"task-{run_id}", run_id, "acme", "w", "Compare Oslo and Rome", datetime.now(UTC))
        await self.tasks.persist_initial(manifest, start=True)
        worker_dir = self.root / "tenants" / "acme" / "workers" / "w"
        scope = ToolScope("acme", "w", run_id, worker_dir, trust_level=2)
        state = RunEngineState(self.tasks, "acme", "w", checkpoint_stores(self.root))
        req = EngineRequest(run_id, planning_skill(), "Compare Oslo and Rome", scope, continuation=continuation)
        req = replace(req, budget=budget)
        return await EngineDispatcher(EngineDeps(self.llm, self.pipeline, state, self.root)).run(req, self.emit)

    async def plan_of(self, run_id: str) -> PlanRecord:
        found = (await self.tasks.get_run(RunRef("acme", "w", run_id))).plan
        assert found is not None
        return found

    def steps(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for e in self.events:
            if isinstance(e, StepStarted):
                out.append((e.step_id, "started"))
            elif isinstance(e, StepFinished):
                out.append((e.step_id, e.status))
        return out


@pytest.fixture
def planner(tmp_path: Path, model_server: ScriptedModelServer) -> Planner:
    return Planner(tmp_path, model_server)


async def test_parallel_branches_a_failed_node_and_a_replan(
    planner: Planner, model_server: ScriptedModelServer
) -> None:
    first = plan(
        {"id": "oslo", "instruction": "Get Oslo's weather", "tools": ["lookup"]},
        {"id": "rome", "instruction": "Get Rome's weather", "tools": ["lookup"]},
        {"id": "compare", "instruction": "Compare them", "depends_on": ["oslo", "rome"]},
    )
    second = plan(
        {"id": "rome_guess", "instruction": "Estimate Rome's weather from the season"},
        {"id": "compare2", "instruction": "Compare them", "depends_on": ["oslo", "rome_guess"]},
    )

    def sees_oslo(body: dict[str, Any]) -> None:
        user = body["messages"][-1]["content"]
        assert (
            "## Result of step oslo\nOslo is 21 C" in user
            and "## Result of step rome_guess\nRome is about 25 C" in user
        )

    def offered(*names: str) -> Any:
        def check(body: dict[str, Any]) -> None:
            assert sorted(t["function"]["name"] for t in body.get("tools") or []) == sorted(names)

        return check

    model_server.expect(
        Reply(first),
        # both branches' first turns answer only once the other has asked: they run at the same time
        When("Your step: oslo", Reply(tool_calls=(ToolCallReply("lookup", {"city": "Oslo"}),)), meet="Your step: rome"),
        When(
            "Your step: rome",
            Reply("STEP FAILED: Rome's station is offline", check=offered("lookup")),
            meet="Your step: oslo",
        ),
        When("Your step: oslo", Reply("Oslo is 21 C")),
        Reply(second, check=lambda body: "rome: Rome's station is offline" in body["messages"][-1]["content"]),
        When("Your step: rome_guess", Reply("Rome is about 25 C", check=offered())),
        When("Your step: compare2", Reply("Rome is warmer than Oslo.", check=sees_oslo)),
    )
    result = await planner.run("r1")
    assert (result.status, result.engine, result.output) == ("completed", "planning", "Rome is warmer than Oslo.")
    recorded = await planner.plan_of("r1")
    states = {n.id: (n.state, n.revision) for n in recorded.nodes}
    assert states == {
        "oslo": ("completed", 1),
        "rome": ("failed", 1),
        "compare": ("skipped", 1),
        "rome_guess": ("completed", 2),
        "compare2": ("completed", 2),
    }
    assert (recorded.status, recorded.revision, recorded.replans) == ("completed", 2, 1)
    assert recorded.node("rome").error == "Rome's station is offline"  # type: ignore[union-attr]
    steps = planner.steps()
    assert steps[:2] == [("plan", "started"), ("plan", "completed")]
    assert ("rome", "failed") in steps and ("replan-2", "completed") in steps and steps[-1] == ("compare2", "completed")
    assert result.tool_calls == 1


async def test_a_refused_plan_is_asked_for_again_with_the_reason(
    planner: Planner, model_server: ScriptedModelServer
) -> None:
    cyclic = plan(
        {"id": "a", "instruction": "x", "depends_on": ["b"]}, {"id": "b", "instruction": "y", "depends_on": ["a"]}
    )
    unknown_tool = plan({"id": "a", "instruction": "x", "tools": ["rm_rf"]})
    too_many = plan(*({"id": f"n{i}", "instruction": "x"} for i in range(9)))
    model_server.expect(
        Reply("I think we should first look at Oslo."),
        Reply(cyclic, check=lambda b: "holds no JSON object" in b["messages"][-1]["content"]),
        Reply(unknown_tool, check=lambda b: "cycle: a -> b -> a" in b["messages"][-1]["content"]),
    )
    result = await planner.run("r1")
    assert (result.status, result.error_code) == ("failed", "invalid_plan")
    assert "names tools this run cannot use: ['rm_rf']" in result.error
    recorded = await planner.plan_of("r1")
    assert len(recorded.rejected) == 3 and recorded.status == "failed"

    def told(body: dict[str, Any]) -> None:
        assert "9 nodes: at most 8 are allowed" in body["messages"][-1]["content"]

    model_server.expect(
        Reply(too_many),
        Reply(plan({"id": "only", "instruction": "Say hi"}), check=told),
        When("Your step: only", Reply("hi")),
    )
    result = await planner.run("r2")
    assert (result.status, result.output) == ("completed", "hi")
    assert "9 nodes" in (await planner.plan_of("r2")).rejected[0]


async def test_the_runs_rounds_cover_the_whole_plan(planner: Planner, model_server: ScriptedModelServer) -> None:
    model_server.expect(
        Reply(
            plan(
                {"id": "a", "instruction": "x", "tools": ["lookup"]},
                {"id": "b", "instruction": "y", "depends_on": ["a"]},
            )
        ),
        When("Your step: a", Reply(tool_calls=(ToolCallReply("lookup", {"city": "Oslo"}),))),
        When("Your step: a", Reply("done a")),
    )
    result = await planner.run("r1", budget=DepthBudget("quick", Tier.FAST, 3, 1_000_000))
    assert result.status == "max_turns_exceeded" and "3 model calls the quick depth allows" in result.output
    recorded = await planner.plan_of("r1")
    assert [(n.id, n.state) for n in recorded.nodes] == [("a", "completed"), ("b", "failed")]


async def test_a_continued_plan_keeps_finished_nodes_and_never_reruns_a_recorded_side_effect(
    planner: Planner, model_server: ScriptedModelServer
) -> None:
    """A run that died mid-plan: `a` had finished, `notify` had started a send, `c` was running reads only."""
    SENT.clear()
    now = datetime.now(UTC)
    died = PlanRecord(
        "running",
        (
            PlanNode("a", "x", state="completed", output="A done", finished_at=now),
            PlanNode(
                "notify", "tell the team", ("a",), ("send_note",), state="running", side_effects=("send_note c9",)
            ),
            PlanNode("c", "read more", ("a",), ("lookup",), state="running"),
            PlanNode("d", "sum up", ("c",)),
            PlanNode("e", "after the note", ("notify",)),
        ),
    )
    manifest = TaskManifest("task-r0", "r0", "acme", "w", "Compare Oslo and Rome", now)
    ref = RunRef("acme", "w", "r0")
    await planner.tasks.persist_initial(manifest, start=True)
    await planner.tasks.record_plan(ref, died)
    await planner.tasks.interrupt(ref, "runtime restarted while running")

    model_server.expect(
        When(
            "Your step: c",
            Reply("C done", check=lambda b: "## Result of step a\nA done" in b["messages"][-1]["content"]),
        ),
        When("Your step: d", Reply("D done")),
    )
    result = await planner.run("r1", continuation=Continuation("r0"))
    assert (result.status, result.error_code) == ("failed", "outcome_unknown")
    assert "notify (send_note c9)" in result.error and SENT == []
    recorded = await planner.plan_of("r1")
    assert recorded.continued_from == "r0" and "continued from run r0" in recorded.notes
    assert {n.id: n.state for n in recorded.nodes} == {
        "a": "completed", "notify": "outcome_unknown", "c": "completed", "d": "completed", "e": "pending",
    }  # fmt: skip
    assert len(model_server.requests) == 2  # no planning call: the plan was carried over


async def test_a_node_waiting_for_approval_continues_where_it_stopped(
    planner: Planner, model_server: ScriptedModelServer
) -> None:
    SENT.clear()
    model_server.expect(
        Reply(plan({"id": "tell", "instruction": "Tell the team", "tools": ["send_note"]})),
        When("Your step: tell", Reply(tool_calls=(ToolCallReply("send_note", {"text": "hello"}, "call_s1"),))),
    )
    planner.pipeline = ToolPipeline([lookup, send_note_gated])
    result = await planner.run("r1")
    assert result.status == "approval_required" and result.pending_approval is not None
    assert result.pending_approval.id == "call_s1"
    assert result.continuation == {"engine": "planning", "run_id": "r1", "node": "tell"}
    waiting = (await planner.plan_of("r1")).node("tell")
    assert (
        waiting is not None and waiting.state == "waiting_approval" and waiting.side_effects == ("send_note call_s1",)
    )
    await planner.tasks.supersede(RunRef("acme", "w", "r1"), "approval")

    def sees_result(body: dict[str, Any]) -> None:
        assert body["messages"][-1] == {"role": "tool", "tool_call_id": "call_s1", "content": "sent"}

    model_server.expect(When("Your step: tell", Reply("Told the team.", check=sees_result)))
    result = await planner.run("r2", continuation=Continuation("r1", approved={"call_s1": "sent"}))
    assert (result.status, result.output) == ("completed", "Told the team.")
    assert SENT == []  # the approved call was run by whoever approved it, not again here
