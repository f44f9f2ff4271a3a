"""GraphEngine: runs a skill's LangGraph graph, built by the factory its SKILL.md names.

The module is imported from the skill's own folder only (`graph.module`, checked again here), and
only after `graph_unavailable` allowed it (the tenant's trust level). The factory gets a
GraphContext; the graph is run with our checkpointer, its thread being the run that started it.

A run ends when the graph ends (`completed`: the state's `output` or `answer`, else the last node's
text), when it interrupts (`approval_required`: a confirmation; approving or rejecting it continues
the thread with `{"approved": bool, "by": ...}` as interrupt()'s answer), when the run's budget is
spent, or after `graph.max_steps` steps. A run that continues a thread without an answer (after a
restart) picks up at its last checkpoint.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from langgraph.errors import GraphRecursionError
from langgraph.types import Command

from genworker.engine.base import EngineDeps, EngineRequest, RunResult
from genworker.engine.events import ApprovalRequired, Emit, StepFinished, StepStarted
from genworker.engine.langgraph.adapter import GraphBudgetExceeded, GraphContext, OutcomeUnknown
from genworker.engine.langgraph.checkpointer import StoredCheckpointer
from genworker.engine.state import GraphRecord
from genworker.tools.base import ToolCall
from genworker.workspace.models.skill import Graph
from genworker.workspace.snapshot import Skill

__all__ = ["GraphEngine", "GraphLoadError", "load_factory"]

ENGINE = "langgraph"
INTERRUPT_TOOL = "langgraph.interrupt"
_OUTPUT_KEYS = ("output", "answer", "result")


class GraphLoadError(Exception):
    """The skill's graph module or factory cannot be loaded."""


_MODULES: dict[tuple[str, float], ModuleType] = {}


def _module_path(skill: Skill, graph: Graph, root: Path) -> Path:
    parts = (graph.module or "").split(".")
    if parts[0] != "workspace" or len(parts) < 2:
        raise GraphLoadError(f"graph.module {graph.module!r} must start with 'workspace.'")
    path = root.joinpath(*parts[1:]).with_suffix(".py").resolve()
    folder = (root / skill.file).resolve().parent
    if not path.is_relative_to(folder) or not path.is_file():
        raise GraphLoadError(f"graph.module {graph.module!r} is not a .py file in the skill's folder")
    return path


def load_factory(skill: Skill, root: Path) -> Any:
    """The skill's graph factory, its module imported from the skill's folder (again after a change)."""
    graph = skill.spec.settings.strategy.graph
    assert graph is not None and graph.factory
    path = _module_path(skill, graph, root)
    key = (str(path), path.stat().st_mtime)
    module = _MODULES.get(key)
    if module is None:
        name = f"genworker_skill_graph_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise GraphLoadError(f"cannot import {path.name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclass / TypedDict states resolve their annotations through it
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise GraphLoadError(f"importing {graph.module}: {type(exc).__name__}: {exc}") from exc
        _MODULES[key] = module
    factory = getattr(module, graph.factory, None)
    if not callable(factory):
        raise GraphLoadError(f"{graph.module} has no function {graph.factory!r}")
    return factory


class GraphEngine:
    def __init__(self, deps: EngineDeps) -> None:
        self.deps = deps

    async def run(self, req: EngineRequest, emit: Emit) -> RunResult:
        graph = req.skill.spec.settings.strategy.graph
        assert graph is not None
        record = GraphRecord(
            await self._thread(req), continued_from=req.continuation.run_id if req.continuation else None
        )
        await self._save(req, record)
        if self.deps.state is not None:
            checkpointer: Any = StoredCheckpointer(self.deps.state.checkpoints())
        else:
            from langgraph.checkpoint.memory import InMemorySaver

            checkpointer = InMemorySaver()
        ctx = GraphContext(self.deps, req, emit, record.thread, checkpointer)
        try:
            compiled = await self._build(req, ctx)
        except GraphLoadError as exc:
            return await self._failed(req, record, "graph_load_failed", str(exc))
        config: dict[str, Any] = {"configurable": {"thread_id": record.thread}, "recursion_limit": graph.max_steps}
        steps: list[str] = []
        try:
            last = await self._stream(compiled, _start(compiled, req), config, steps, emit)
        except GraphBudgetExceeded as exc:
            return await self._stopped(req, record, steps, exc.reason, str(exc), ctx)
        except GraphRecursionError:
            text = f"stopped after graph.max_steps ({graph.max_steps}) steps without reaching the end"
            return await self._stopped(req, record, steps, "max_turns_exceeded", text, ctx)
        except OutcomeUnknown as exc:
            return await self._failed(req, record, "outcome_unknown", str(exc), steps, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the skill's graph code failed
            return await self._failed(req, record, "graph_error", f"{type(exc).__name__}: {exc}", steps, ctx)
        return await self._ended(req, emit, record, compiled, config, steps, last, ctx)

    async def _thread(self, req: EngineRequest) -> str:
        """The checkpoint thread: a continued run's, else this run's id."""
        cont = req.continuation
        if cont is None:
            return req.run_id
        earlier = await self.deps.state.load_graph(cont.run_id) if self.deps.state is not None else None
        return earlier.thread if isinstance(earlier, GraphRecord) else cont.run_id

    @staticmethod
    async def _stream(compiled: Any, start: Any, config: dict[str, Any], steps: list[str], emit: Emit) -> Any:
        """Run the graph, a step event per node update; the last update."""
        last: Any = None
        # sync: each step's checkpoint is stored before the next step starts (a killed process loses no step)
        async for chunk in compiled.astream(start, config, stream_mode="updates", durability="sync"):
            for node, update in chunk.items():
                if node == "__interrupt__":
                    continue
                steps.append(node)
                last = update
                await emit(StepStarted(node, "graph_node"))
                await emit(StepFinished(node, "completed", _shown(update)))
        return last

    async def _ended(
        self,
        req: EngineRequest,
        emit: Emit,
        record: GraphRecord,
        compiled: Any,
        config: dict[str, Any],
        steps: list[str],
        last: Any,
        ctx: GraphContext,
    ) -> RunResult:
        """The graph stopped: interrupted (a person decides) or at its end."""
        snapshot = await compiled.aget_state(config)
        checkpoint_id = (snapshot.config or {}).get("configurable", {}).get("checkpoint_id")
        interrupts = tuple(getattr(snapshot, "interrupts", ()) or ())
        thread, origin = record.thread, record.continued_from
        if interrupts:
            value = _jsonable(interrupts[0].value)
            await self._save(req, GraphRecord(thread, "interrupted", checkpoint_id, tuple(steps), value, origin))
            call = ToolCall(f"{req.run_id}:interrupt", INTERRUPT_TOOL, {"value": value})
            await emit(ApprovalRequired(call.id, INTERRUPT_TOOL, json.dumps(value, ensure_ascii=False), _reason(value)))
            return RunResult(
                "approval_required", engine=ENGINE, error=_reason(value), tool_calls=ctx.tools.calls,
                pending_approval=call,
                continuation={"engine": ENGINE, "run_id": req.run_id, "thread": thread, "kind": "interrupt"},
            )  # fmt: skip
        values = dict(snapshot.values) if isinstance(snapshot.values, Mapping) else _fields(snapshot.values)
        await self._save(req, GraphRecord(thread, "completed", checkpoint_id, tuple(steps), None, origin))
        output = _output(values, last)
        return RunResult("completed", output, ENGINE, tool_calls=ctx.tools.calls, step_outputs=_step_values(values))

    async def _build(self, req: EngineRequest, ctx: GraphContext) -> Any:
        root = self.deps.workspace_root
        if root is None:
            raise GraphLoadError("no workspace root: graph modules cannot be found")
        factory = await asyncio.to_thread(load_factory, req.skill, root)
        try:
            built = factory(ctx)
        except Exception as exc:
            raise GraphLoadError(f"{req.skill.spec.settings.strategy.graph.factory}(ctx) failed: {exc}") from exc  # type: ignore[union-attr]
        if hasattr(built, "compile") and not hasattr(built, "astream"):
            built = built.compile(checkpointer=ctx.checkpointer)
        if not hasattr(built, "astream"):
            raise GraphLoadError(f"the factory returned {type(built).__name__}, not a LangGraph graph")
        built.checkpointer = ctx.checkpointer  # always ours: checkpoints live in the runtime's stores
        return built

    async def _save(self, req: EngineRequest, record: GraphRecord) -> None:
        if self.deps.state is not None:
            await self.deps.state.save_graph(req.run_id, record)

    async def _stopped(
        self, req: EngineRequest, record: GraphRecord, steps: list[str], reason: str, text: str, ctx: GraphContext
    ) -> RunResult:
        await self._save(req, GraphRecord(record.thread, "failed", None, tuple(steps), None, record.continued_from))
        status: Any = "budget_exceeded" if reason == "budget_exceeded" else "max_turns_exceeded"
        return RunResult(status, text, ENGINE, error=text, tool_calls=ctx.tools.calls)

    async def _failed(
        self,
        req: EngineRequest,
        record: GraphRecord,
        code: str,
        message: str,
        steps: list[str] | None = None,
        ctx: GraphContext | None = None,
    ) -> RunResult:
        failed = GraphRecord(record.thread, "failed", None, tuple(steps or ()), None, record.continued_from)
        await self._save(req, failed)
        calls = ctx.tools.calls if ctx is not None else 0
        return RunResult("failed", engine=ENGINE, error_code=code, error=message, tool_calls=calls)


def _start(compiled: Any, req: EngineRequest) -> Any:
    """What the graph is run with: a new thread's first state, an interrupt's answer, or nothing
    (continue from the last checkpoint)."""
    cont = req.continuation
    if cont is None:
        return _input(compiled, req.task)
    return Command(resume=dict(cont.answer)) if cont.answer is not None else None


def _input(compiled: Any, task: str) -> dict[str, Any]:
    """The graph's first state: the task in its `task` or `input` field (else its first field)."""
    channels = [c for c in getattr(compiled, "channels", {}) if not c.startswith(("__", "branch:"))]
    named = [c for c in ("task", "input") if c in channels]
    if named:
        return dict.fromkeys(named, task)
    return {channels[0]: task} if channels else {}


def _fields(value: Any) -> dict[str, Any]:
    return dict(getattr(value, "__dict__", {}) or {})


def _output(values: Mapping[str, Any], last: Any) -> str:
    for key in _OUTPUT_KEYS:
        if isinstance(values.get(key), str) and values[key]:
            return str(values[key])
    if isinstance(last, Mapping):
        texts = [v for v in last.values() if isinstance(v, str) and v]
        if texts:
            return texts[-1]
    return ""


def _shown(update: Any) -> Any:
    return _jsonable(update) if isinstance(update, Mapping) else None


def _step_values(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in values.items()}


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)


def _reason(value: Any) -> str:
    if isinstance(value, Mapping):
        for key in ("question", "prompt", "reason", "message"):
            if isinstance(value.get(key), str):
                return str(value[key])
        if value.get("type") == "tool_approval":
            return f"tool {value.get('tool')} needs a person's approval"
    return value if isinstance(value, str) else "the graph asks a person to decide"
