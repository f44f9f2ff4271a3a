"""A task from manifest to finished run: real engine over real LiteLLM to the scripted model
server, real ToolPipeline whose audit feeds the run's tool calls, files checked on disk."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.engine.base import EngineDeps, EngineRequest, RunResult
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.tools.audit import MemoryAuditSink
from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.worker.lifecycle import RunToolCallSink, TaskLifecycle
from genworker.worker.task import (
    GoalStatus,
    GovernanceVerdict,
    RunRecord,
    RunRef,
    RunState,
    TaskManifest,
    TaskProvenance,
    new_run_id,
    new_task_id,
)
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


@function_tool(effect=Effect.WRITE, requires_approval=True)
async def send_invoice(customer: str) -> str:
    """Send an invoice (needs a person's approval)."""
    return f"sent to {customer}"


def skill() -> Skill:
    settings = {"strategy": {"mode": "autonomous", "max_turns": 3}}
    spec = SkillSpec.model_validate({"name": "weather", "description": "d", "metadata": {"genworker": settings}})
    return Skill(spec, SkillLevel.WORKER, "skills/weather/SKILL.md", "", frozen_map(instruction_blocks("")))


class Runner:
    """What a TaskRunner does: persist, start, run the engine, settle; only through the aggregate."""

    def __init__(self, tmp_path: Path, server: ScriptedModelServer) -> None:
        env = {
            "GENWORKER_LLM_MODEL": "openai/scripted",
            "GENWORKER_LLM_API_BASE": server.base_url,
            "GENWORKER_LLM_API_KEY": "k",
        }
        self.root = tmp_path / "ws"
        self.lifecycle = TaskLifecycle(self.root)
        self.audit = MemoryAuditSink()
        pipeline = ToolPipeline([lookup, send_invoice], audit=RunToolCallSink(self.lifecycle, self.audit))
        self.deps = EngineDeps(LLMClient(load_model_config(load_settings(tmp_path, env))), pipeline)

    async def submit(self, text: str, **provenance: Any) -> RunRecord:
        manifest = TaskManifest(
            task_id=new_task_id(),
            run_id=new_run_id(),
            tenant_id="acme",
            worker_id="w",
            text=text,
            created_at=datetime.now(UTC),
            thread_id="thread-1",
            skill_id="weather",
            provenance=TaskProvenance(**provenance),
        )
        return await self.lifecycle.persist_initial(manifest)

    async def execute(self, run: RunRecord, text: str, approved: frozenset[str] = frozenset()) -> RunResult:
        scope = ToolScope("acme", "w", run.run_id, self.root, trust_level=2, approved_call_ids=approved)
        request = EngineRequest(run.run_id, skill(), text, scope)

        async def emit(event: EngineEvent) -> None:
            return None

        return await EngineDispatcher(self.deps).run(request, emit)

    def worker_dir(self) -> Path:
        return self.root / "tenants" / "acme" / "workers" / "w"


@pytest.fixture
def runner(tmp_path: Path, model_server: ScriptedModelServer) -> Runner:
    return Runner(tmp_path, model_server)


async def test_persist_start_complete_writes_everything(runner: Runner, model_server: ScriptedModelServer) -> None:
    model_server.expect(
        Reply("Checking.", tool_calls=(ToolCallReply("lookup", {"city": "Oslo"}, "c1"),), prompt_tokens=40),
        Reply("It is 21 degrees in Oslo.", prompt_tokens=60, completion_tokens=9),
    )
    verdict = GovernanceVerdict("auto", "normal", "low", ("read only",))
    queued = await runner.submit("weather in Oslo?", source_type="chat", goal_id="g1", governance_decision=verdict)
    task_file = runner.worker_dir() / "tasks" / "active" / f"{queued.task_id}.json"
    assert task_file.is_file()

    running = await runner.lifecycle.start(queued.ref)
    result = await runner.execute(running, "weather in Oslo?")
    run = await runner.lifecycle.complete(queued.ref, result, goal_status=GoalStatus.MET)

    assert (run.state, run.goal_status, run.engine) == (RunState.COMPLETED, GoalStatus.MET, "react")
    assert [(c.name, c.call_id, c.outcome) for c in run.tool_calls] == [("lookup", "c1", "completed")]
    assert [(u.model, u.prompt_tokens, u.completion_tokens) for u in run.model_usage] == [
        ("scripted", 40, 5),
        ("scripted", 60, 9),
    ]
    assert [(d.kind, d.content) for d in run.deliverables] == [("text", "It is 21 degrees in Oslo.")]
    assert run.timings.finished_at is not None and run.timings.total_ms is not None
    assert run.provenance.governance_decision == verdict and run.thread_id == "thread-1"

    assert not task_file.exists()
    done = runner.worker_dir() / "tasks" / "done" / f"{queued.task_id}.json"
    assert json.loads(done.read_text(encoding="utf-8"))["text"] == "weather in Oslo?"
    on_disk = json.loads((runner.worker_dir() / "runs" / f"{run.run_id}.json").read_text(encoding="utf-8"))
    assert on_disk["state"] == "completed" and on_disk["schema_version"] == 1 and on_disk["version"] == run.version
    assert on_disk["tool_calls"][0]["name"] == "lookup"
    assert await runner.lifecycle.list_runs("acme", "w") == [run]


async def test_approval_then_resume(runner: Runner, model_server: ScriptedModelServer) -> None:
    model_server.expect(
        Reply(tool_calls=(ToolCallReply("send_invoice", {"customer": "Globex"}, "inv1"),)),
        Reply(tool_calls=(ToolCallReply("send_invoice", {"customer": "Globex"}, "inv1"),)),
        Reply("Invoice sent."),
    )
    queued = await runner.submit("invoice Globex")
    running = await runner.lifecycle.start(queued.ref)
    waiting = await runner.lifecycle.complete(queued.ref, await runner.execute(running, "invoice Globex"))
    assert waiting.state is RunState.WAITING_APPROVAL
    assert waiting.pending_approval is not None and waiting.pending_approval.call_id == "inv1"
    assert [c.outcome for c in waiting.tool_calls] == ["needs_approval"]
    assert (runner.worker_dir() / "tasks" / "active" / f"{queued.task_id}.json").is_file()

    resumed = await runner.lifecycle.resume(queued.ref, approval_ref="confirmation:inv1")
    result = await runner.execute(resumed, "invoice Globex", approved=frozenset({"inv1"}))
    run = await runner.lifecycle.complete(queued.ref, result)
    assert run.state is RunState.COMPLETED and run.provenance.approval_ref == "confirmation:inv1"
    assert [c.outcome for c in run.tool_calls] == ["needs_approval", "completed"]
    assert len(run.model_usage) == 3


async def test_max_turns_is_a_budget_not_a_plain_failure(runner: Runner, model_server: ScriptedModelServer) -> None:
    model_server.expect(*(Reply(tool_calls=(ToolCallReply("lookup", {"city": str(i)}),)) for i in range(3)))
    queued = await runner.submit("loop forever")
    running = await runner.lifecycle.start(queued.ref)
    run = await runner.lifecycle.complete(queued.ref, await runner.execute(running, "loop forever"))
    assert run.state is RunState.BUDGET_EXCEEDED
    assert run.error is not None and run.error.code == "max_turns_exceeded"
    assert len(run.tool_calls) == 3 and len(run.model_usage) == 3


async def test_tool_calls_outside_a_persisted_run_are_only_audited(
    runner: Runner, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(tool_calls=(ToolCallReply("lookup", {"city": "Rome"}),)), Reply("Sunny."))
    chat_turn = replace(await runner.submit("x"), run_id="chat-turn-1")
    result = await runner.execute(chat_turn, "weather in Rome?")
    assert result.status == "completed" and len(runner.audit.records) == 1
    assert not (runner.worker_dir() / "runs" / "chat-turn-1.json").exists()


async def test_engine_failure_is_recorded(runner: Runner, model_server: ScriptedModelServer) -> None:
    queued = await runner.submit("x")
    await runner.lifecycle.start(queued.ref)
    failed = RunResult("failed", engine="react", error_code="provider_error", error="401: bad key")
    run = await runner.lifecycle.complete(RunRef("acme", "w", queued.run_id), failed)
    assert run.state is RunState.FAILED and run.error is not None
    assert (run.error.code, run.error.message) == ("provider_error", "401: bad key")
    assert (runner.worker_dir() / "tasks" / "done" / f"{queued.task_id}.json").is_file()
