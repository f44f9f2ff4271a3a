"""The LangGraph engine's parts: checkpoints in the worker's files and in Redis (a graph interrupted in
one saver resumes in another), graph tool calls through the ToolPipeline logged so a re-run node
never calls twice, and what happens where a graph cannot run (trust, no extra)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
import redis
from langgraph.graph import END, StateGraph
from langgraph.types import Command, interrupt

import genworker.engine.langgraph as langgraph_engine
from genworker.engine.base import EngineDeps, EngineRequest
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent
from genworker.engine.langgraph.checkpointer import FileCheckpoints, RedisCheckpoints, StoredCheckpointer
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.workspace.errors import Issue
from genworker.workspace.models.skill import SkillLevel
from genworker.workspace.scan import Scope
from genworker.workspace.skills import load_skill

pytestmark = pytest.mark.anyio


class Counter(TypedDict, total=False):
    task: str
    n: int
    answer: str


def counting_graph(saver: Any) -> Any:
    """count -> count ... (a loop to 3) -> ask (interrupt) -> END."""

    def count(state: Counter) -> dict[str, Any]:
        return {"n": state.get("n", 0) + 1}

    def ask(state: Counter) -> dict[str, Any]:
        answer = interrupt({"question": f"n is {state['n']}: keep it?"})
        return {"answer": "kept" if answer["approved"] else "dropped"}

    graph = StateGraph(Counter)
    graph.add_node("count", count)
    graph.add_node("ask", ask)
    graph.set_entry_point("count")
    graph.add_conditional_edges("count", lambda s: "ask" if s["n"] >= 3 else "count", {"ask": "ask", "count": "count"})
    graph.add_edge("ask", END)
    return graph.compile(checkpointer=saver)


async def interrupted_then_resumed(first: Any, second: Any) -> None:
    config: Any = {"configurable": {"thread_id": "run_1"}}
    await counting_graph(StoredCheckpointer(first)).ainvoke({"task": "t"}, config, durability="sync")
    fresh = counting_graph(StoredCheckpointer(second))  # another process, say
    waiting = await fresh.aget_state(config)
    assert waiting.values["n"] == 3 and waiting.interrupts[0].value == {"question": "n is 3: keep it?"}
    done = await fresh.ainvoke(Command(resume={"approved": True}), config, durability="sync")
    assert done == {"task": "t", "n": 3, "answer": "kept"}
    history = [s async for s in fresh.aget_state_history(config)]
    assert len(history) >= 5 and history[0].values["answer"] == "kept"


async def test_file_checkpoints_resume_an_interrupted_graph_in_another_saver(tmp_path: Path) -> None:
    await interrupted_then_resumed(FileCheckpoints(tmp_path / "w"), FileCheckpoints(tmp_path / "w"))
    thread = tmp_path / "w" / "runtime" / "graphs" / "run_1"
    assert len(list((thread / "root").glob("*.json"))) >= 5
    FileCheckpoints(tmp_path / "w").delete("run_1")
    assert not thread.exists()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


async def test_redis_checkpoints_resume_an_interrupted_graph_in_another_saver(redis_client: Any) -> None:
    worker = f"w{uuid.uuid4().hex[:8]}"
    first, second = RedisCheckpoints(redis_client, "acme", worker), RedisCheckpoints(redis_client, "acme", worker)
    try:
        await interrupted_then_resumed(first, second)
        assert redis_client.hlen(f"genworker:graph:acme:{worker}:run_1:checkpoints") >= 5
    finally:
        first.delete("run_1")
    assert list(redis_client.scan_iter(match=f"genworker:graph:acme:{worker}:*")) == []


GRAPH_SKILL = """---
name: counter
description: d
metadata:
  genworker:
    strategy:
      mode: langgraph
      fallback: {mode: autonomous}
      graph: {module: workspace.tenants.acme.skills.counter.graph, factory: build_graph}
---
Count.
"""
GRAPH_CODE = """
from typing import TypedDict

class S(TypedDict, total=False):
    task: str
    output: str

def build_graph(ctx):
    from langgraph.graph import END, StateGraph

    async def answer(state):
        reply = await ctx.llm.invoke([{"role": "user", "content": state["task"]}])
        return {"output": reply.content}

    graph = StateGraph(S)
    graph.add_node("answer", answer)
    graph.set_entry_point("answer")
    graph.add_edge("answer", END)
    return graph
"""


@pytest.fixture
def graph_skill_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ws" / "tenants" / "acme" / "skills" / "counter"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(GRAPH_SKILL, encoding="utf-8")
    (folder / "graph.py").write_text(GRAPH_CODE, encoding="utf-8")
    return folder


def test_check_says_why_a_graph_of_a_low_trust_tenant_runs_its_fallback(graph_skill_folder: Path) -> None:
    scope = Scope(graph_skill_folder.parents[3])
    skill, warnings = load_skill(scope, graph_skill_folder, SkillLevel.TENANT, trust_level=1)
    assert skill.name == "counter"
    [issue] = [w for w in warnings if w.field == "metadata.genworker.strategy.graph"]
    assert issue == Issue(
        "warning",
        "tenants/acme/skills/counter/SKILL.md",
        "graph.module 'workspace.tenants.acme.skills.counter.graph' runs code in the server and the tenant's "
        "trust_level is 1 (it needs 2 or more): a run uses its fallback (autonomous)",
        "metadata.genworker.strategy.graph",
        issue.line,
    )
    _, trusted = load_skill(scope, graph_skill_folder, SkillLevel.TENANT, trust_level=2)
    assert not [w for w in trusted if w.field == "metadata.genworker.strategy.graph"]


async def test_a_graph_runs_for_a_trusted_tenant_and_falls_back_without_the_extra(
    graph_skill_folder: Path, tmp_path: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = graph_skill_folder.parents[3]
    skill, _ = load_skill(Scope(root), graph_skill_folder, SkillLevel.TENANT, trust_level=2)
    env = {"GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model_server.base_url}
    llm = LLMClient(load_model_config(load_settings(tmp_path, {**env, "GENWORKER_LLM_API_KEY": "k"})))
    events: list[EngineEvent] = []

    async def emit(event: EngineEvent) -> None:
        events.append(event)

    async def run(trust: int) -> Any:
        scope = ToolScope("acme", "w", "run_1", tmp_path, trust_level=trust)
        deps = EngineDeps(llm, ToolPipeline([]), workspace_root=root)
        return await EngineDispatcher(deps).run(EngineRequest("run_1", skill, "say hi", scope), emit)

    model_server.expect(Reply("hi from the graph"))
    result = await run(2)
    assert (result.status, result.engine, result.output) == ("completed", "langgraph", "hi from the graph")

    monkeypatch.setattr(langgraph_engine, "langgraph_missing", lambda: langgraph_engine.EXTRA_MISSING)
    model_server.expect(Reply("hi without the graph"))
    result = await run(2)
    assert (result.status, result.engine, result.output) == ("completed", "react", "hi without the graph")
    assert result.fallback == {"from": "langgraph", "to": "autonomous", "reason": langgraph_engine.EXTRA_MISSING}


SENT: list[str] = []
NOTE_SKILL = GRAPH_SKILL.replace("counter", "noter")
NOTE_CODE = """
from typing import TypedDict

class S(TypedDict, total=False):
    task: str
    output: str

def build_graph(ctx):
    from langgraph.graph import END, StateGraph

    async def send_then_ask(state):
        sent = await ctx.tools.call("send_note", {"text": state["task"]})
        answer = ctx.interrupt({"question": "Was the note right?"})
        return {"output": f"{sent.content}; confirmed: {answer['approved']}"}

    graph = StateGraph(S)
    graph.add_node("send_then_ask", send_then_ask)
    graph.set_entry_point("send_then_ask")
    graph.add_edge("send_then_ask", END)
    return graph
"""


async def test_a_node_run_again_after_an_interrupt_does_not_repeat_its_side_effect(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    from datetime import UTC, datetime

    from genworker.engine.base import Continuation
    from genworker.tools.base import Effect
    from genworker.tools.tool import function_tool
    from genworker.worker.engine_runs import RunEngineState, checkpoint_stores
    from genworker.worker.lifecycle import TaskLifecycle
    from genworker.worker.task import RunRef, TaskManifest

    @function_tool(effect=Effect.EXTERNAL, name="send_note")
    async def send_note(text: str) -> str:
        """Send a note.

        Args:
            text: the note
        """
        SENT.append(text)
        return f"sent {len(SENT)}"

    root = tmp_path / "ws"
    folder = root / "tenants" / "acme" / "skills" / "noter"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(NOTE_SKILL, encoding="utf-8")
    (folder / "graph.py").write_text(NOTE_CODE, encoding="utf-8")
    skill, _ = load_skill(Scope(root), folder, SkillLevel.TENANT, trust_level=2)
    env = {"GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model_server.base_url}
    llm = LLMClient(load_model_config(load_settings(tmp_path, {**env, "GENWORKER_LLM_API_KEY": "k"})))
    tasks = TaskLifecycle(root)
    SENT.clear()

    async def emit(event: EngineEvent) -> None:
        return None

    async def run(run_id: str, continuation: Continuation | None = None) -> Any:
        manifest = TaskManifest(f"t-{run_id}", run_id, "acme", "w", "the note", datetime.now(UTC))
        await tasks.persist_initial(manifest, start=True)
        scope = ToolScope("acme", "w", run_id, root / "tenants" / "acme" / "workers" / "w", trust_level=2)
        state = RunEngineState(tasks, "acme", "w", checkpoint_stores(root))
        deps = EngineDeps(llm, ToolPipeline([send_note]), state, root)
        req = EngineRequest(run_id, skill, "the note", scope, continuation=continuation)
        return await EngineDispatcher(deps).run(req, emit)

    waiting = await run("r1")
    assert waiting.status == "approval_required" and waiting.continuation["thread"] == "r1"
    assert SENT == ["the note"]
    await tasks.supersede(RunRef("acme", "w", "r1"), "approved")
    done = await run("r2", Continuation("r1", answer={"approved": True, "by": "dana"}))
    assert (done.status, done.output) == ("completed", "sent 1; confirmed: True")
    assert SENT == ["the note"]  # the node ran again; the send did not
    record = (await tasks.get_run(RunRef("acme", "w", "r2"))).graph
    assert record is not None and (record.thread, record.continued_from, record.status) == ("r1", "r1", "completed")


def test_runtime_status_says_whether_langgraph_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from genworker.observability.status import ComponentStatus
    from genworker.runtime.composition import _langgraph

    ready = _langgraph(SimpleNamespace(redis=None))  # type: ignore[arg-type]
    assert (ready.status, ready.details) == (ComponentStatus.READY, {"checkpoints": "filesystem"})
    monkeypatch.setattr(langgraph_engine, "langgraph_missing", lambda: langgraph_engine.EXTRA_MISSING)
    missing = _langgraph(SimpleNamespace(redis=None))  # type: ignore[arg-type]
    assert missing.status == ComponentStatus.DISABLED
    assert missing.reason == f"{langgraph_engine.EXTRA_MISSING}: langgraph skills run their fallback"
