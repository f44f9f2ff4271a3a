"""PlanningEngine: the model decomposes the task into a DAG at run time, and each node runs as a ReAct
sub-run through the same ToolPipeline.

plan (a refused plan is asked for again, PLAN_ATTEMPTS in all) -> nodes whose dependencies are done
run, at most `max_parallel` at once, each seeing its dependencies' results -> a failed node stops new
starts and, once the running ones end, the remaining work is planned again (MAX_REPLANS) -> the
results of the nodes nothing depends on are the answer.

Every model call (planning and each node's turns) counts against the run's rounds and token budget.
The plan and each node's state are written to the run record as they change (`EngineState`); a
side-effecting tool call is written down before it runs, so a run that continues this one (after an
approval, or a restart) keeps finished nodes and never runs a node whose side effect was recorded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, assert_never

from genworker.engine.base import (
    EngineDeps,
    EngineRequest,
    FinalOutput,
    Interrupted,
    Message,
    NeedsApproval,
    RunAgain,
    RunResult,
)
from genworker.engine.events import Emit, StepFinished, StepStarted
from genworker.engine.planning.plan import PlanRejected, parse_plan, plan_prompt
from genworker.engine.react import ReactLoop, initial_messages
from genworker.engine.state import PlanNode, PlanRecord
from genworker.llm.client import recorded_tokens
from genworker.llm.errors import ContextOverflowError, ProviderError
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.tools.base import ToolCall, ToolSpec
from genworker.tools.context import Caller, ToolScope
from genworker.tools.journal import SIDE_EFFECTS
from genworker.tools.outcomes import ToolNeedsApproval, ToolOutcome, outcome_text

__all__ = ["FAILED_MARK", "MAX_NODES", "MAX_PARALLEL", "MAX_REPLANS", "PLAN_ATTEMPTS", "PlanningEngine"]

MAX_NODES = 8  # per plan (and per re-plan)
MAX_PARALLEL = 3  # nodes running at once
PLAN_ATTEMPTS = 3  # model answers per planning step, refused ones included
MAX_REPLANS = 2
ENGINE = "planning"
FAILED_MARK = "STEP FAILED:"
_NODE_NOTE = (
    "You carry out one step of a larger plan. Do only this step, using the results of earlier steps "
    f"given below; answer with the step's result. If the step cannot be done, answer '{FAILED_MARK} <why>'."
)


@dataclass(frozen=True, slots=True)
class _Failed:
    reason: str


_NodeOutcome = FinalOutput | _Failed | NeedsApproval | Interrupted


class _Rounds:
    """The run's model calls left (the execution depth's max_rounds), over the whole plan."""

    def __init__(self, limit: int | None) -> None:
        self.limit, self.used = limit, 0

    def take(self) -> bool:
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True


class _Recorded:
    """The pipeline, with each side-effecting call of one node written to the plan before it runs."""

    def __init__(self, inner: Any, before: Callable[[ToolCall], Any]) -> None:
        self.inner, self.before = inner, before

    def visible(self, scope: ToolScope) -> list[ToolSpec]:
        return list(self.inner.visible(scope))

    async def execute(self, scope: ToolScope, call: ToolCall, caller: Caller = "llm") -> ToolOutcome:
        spec = next((s for s in self.inner.visible(scope) if s.name == call.name), None)
        if spec is not None and (spec.effect is None or spec.effect in SIDE_EFFECTS):
            await self.before(call)
        outcome: ToolOutcome = await self.inner.execute(scope, call, caller)
        return outcome


class PlanningEngine:
    def __init__(self, deps: EngineDeps, *, max_nodes: int = MAX_NODES, max_parallel: int = MAX_PARALLEL) -> None:
        self.deps = deps
        self.max_nodes, self.max_parallel = max_nodes, max_parallel
        self.plan = PlanRecord("planning")
        self.tool_calls = 0
        self._lock = asyncio.Lock()

    async def run(self, req: EngineRequest, emit: Emit) -> RunResult:
        rounds = _Rounds(req.budget.max_rounds if req.budget is not None else None)
        if not await self._continue(req):
            stop = await self._make_plan(req, emit, rounds)
            if stop is not None:
                return stop
        while True:
            stop = await self._execute(req, emit, rounds)
            if stop is not None:
                return stop
            failed = [n for n in self.plan.nodes if n.state == "failed" and n.revision == self.plan.revision]
            if not failed:
                break
            if self.plan.replans >= MAX_REPLANS:
                return await self._fail(req, "plan_failed", _failure(failed, f"after {MAX_REPLANS} re-plans"))
            stop = await self._make_plan(req, emit, rounds, failed=failed)
            if stop is not None:
                return stop
        unknown = [n for n in self.plan.nodes if n.state == "outcome_unknown"]
        if unknown:
            ids = ", ".join(f"{n.id} ({'; '.join(n.side_effects)})" for n in unknown)
            message = f"nodes whose side effects may have happened are not run again; a person decides: {ids}"
            return await self._fail(req, "outcome_unknown", message)
        await self._save(req, replace(self.plan, status="completed"))
        outputs = {n.id: n.output for n in self.plan.nodes if n.state == "completed"}
        return RunResult("completed", self._answer(), ENGINE, tool_calls=self.tool_calls, step_outputs=outputs)

    # -- the plan ---------------------------------------------------------------------

    async def _continue(self, req: EngineRequest) -> bool:
        """Take over the plan of the run this one continues; False when there is none to take."""
        cont, state = req.continuation, self.deps.state
        if cont is None or state is None:
            return False
        earlier = await state.load_plan(cont.run_id)
        if not isinstance(earlier, PlanRecord) or not earlier.nodes:
            return False
        nodes = tuple(_carried(n) for n in earlier.nodes)
        note = f"continued from run {cont.run_id}"
        await self._save(
            req,
            replace(earlier, status="running", nodes=nodes, notes=(*earlier.notes, note), continued_from=cont.run_id),
        )
        return True

    async def _make_plan(
        self, req: EngineRequest, emit: Emit, rounds: _Rounds, *, failed: list[PlanNode] | None = None
    ) -> RunResult | None:
        """Ask for a plan (or, with `failed`, a plan for the remaining work); None once one is accepted."""
        revision = self.plan.revision + 1 if failed else self.plan.revision
        step = "plan" if not failed else f"replan-{revision}"
        kept = [n for n in self.plan.nodes if n.state == "completed"]
        tools = [s.name for s in self.deps.tools.visible(req.scope)]
        system = "\n\n".join(
            p for p in (req.system, req.skill.instructions, plan_prompt(tools, self.max_nodes, kept=kept)) if p
        )
        messages: list[Message] = [
            {"role": "system", "content": system},
            *req.history,
            {"role": "user", "content": req.task},
        ]
        if failed:
            messages.append({"role": "user", "content": _replan_request(self.plan, failed)})
        await emit(StepStarted(step, "plan"))
        rejected: list[str] = []
        for attempt in range(1, PLAN_ATTEMPTS + 1):
            if not rounds.take():
                return await self._stopped(req, "max_turns_exceeded", _rounds_text(req, rounds))
            tier = req.budget.tier if req.budget is not None else None
            completion = await self.deps.llm.complete(LLMCallIntent(Purpose.PLAN, tier=tier), messages)
            if (stop := await self._over_tokens(req)) is not None:
                return stop
            taken = [n.id for n in self.plan.nodes]
            try:
                nodes = parse_plan(completion.text, tools, self.max_nodes, kept=kept, taken=taken, revision=revision)
            except PlanRejected as exc:
                rejected.append(f"revision {revision}, answer {attempt}: {exc}")
                messages += [
                    {"role": "assistant", "content": completion.text},
                    {
                        "role": "user",
                        "content": f"That plan is refused: {exc}. Answer with a corrected plan, JSON only.",
                    },
                ]
                continue
            old = tuple(_retired(n) if n.state != "completed" else n for n in self.plan.nodes) if failed else ()
            notes = (
                (*self.plan.notes, _failure(failed, f"re-planned as revision {revision}"))
                if failed
                else self.plan.notes
            )
            plan = PlanRecord(
                "running", (*old, *nodes), revision, self.plan.replans + (1 if failed else 0),
                (*self.plan.rejected, *rejected), notes, self.plan.continued_from,
            )  # fmt: skip
            await self._save(req, plan)
            await emit(StepFinished(step, "completed", {"nodes": [_shown(n) for n in nodes]}))
            return None
        await self._save(req, replace(self.plan, status="failed", rejected=(*self.plan.rejected, *rejected)))
        await emit(StepFinished(step, "failed", rejected[-1]))
        message = f"no valid plan in {PLAN_ATTEMPTS} answers; the last was refused: {rejected[-1].split(': ', 1)[-1]}"
        return RunResult("failed", engine=ENGINE, error_code="invalid_plan", error=message, tool_calls=self.tool_calls)

    # -- running nodes ----------------------------------------------------------------

    async def _execute(self, req: EngineRequest, emit: Emit, rounds: _Rounds) -> RunResult | None:
        """Run ready nodes until none is left to start; a result when the run stops here."""
        running: dict[str, asyncio.Task[_NodeOutcome]] = {}
        stop: RunResult | None = None
        try:
            while True:
                if stop is None and not any(n.state == "failed" for n in self._current()):
                    for node in self._ready(exclude=running):
                        if len(running) >= self.max_parallel:
                            break
                        await self._set(req, node.id, state="running", started_at=_now(), error="")
                        await emit(StepStarted(node.id, "plan_node"))
                        running[node.id] = asyncio.create_task(self._node(req, emit, node.id, rounds))
                if not running:
                    return stop
                done, _ = await asyncio.wait(running.values(), return_when=asyncio.FIRST_COMPLETED)
                for node_id, task in list(running.items()):
                    if task in done:
                        del running[node_id]
                        stop = await self._settle(req, emit, node_id, task.result()) or stop
        finally:
            for task in running.values():
                task.cancel()
            if running:
                await asyncio.gather(*running.values(), return_exceptions=True)

    async def _settle(self, req: EngineRequest, emit: Emit, node_id: str, outcome: _NodeOutcome) -> RunResult | None:
        match outcome:
            case FinalOutput(text=text):
                await self._set(req, node_id, state="completed", output=text, finished_at=_now())
                await emit(StepFinished(node_id, "completed", text))
                return None
            case _Failed(reason=reason):
                await self._set(req, node_id, state="failed", error=reason, finished_at=_now())
                await emit(StepFinished(node_id, "failed", reason))
                return None
            case NeedsApproval(call=call, reason=reason, checkpoint=checkpoint):
                pending = {"id": call.id, "name": call.name, "arguments": dict(call.arguments)}
                await self._set(
                    req, node_id, state="waiting_approval", checkpoint=_plain(checkpoint), pending_call=pending
                )
                await self._save(req, replace(self.plan, status="waiting_approval"))
                return RunResult(
                    "approval_required", engine=ENGINE, error=reason, tool_calls=self.tool_calls,
                    pending_approval=call, continuation={"engine": ENGINE, "run_id": req.run_id, "node": node_id},
                )  # fmt: skip
            case Interrupted(reason=reason, text=text):
                await self._set(req, node_id, state="failed", error=text or reason, finished_at=_now())
                await emit(StepFinished(node_id, "failed", text or reason))
                return await self._stopped(req, reason, text)
            case _:
                assert_never(outcome)

    async def _node(self, req: EngineRequest, emit: Emit, node_id: str, rounds: _Rounds) -> _NodeOutcome:
        """One node's ReAct sub-run (continued from its checkpoint when it waited for an approval)."""
        node = self._node_of(node_id)
        runner = _Recorded(self.deps.tools, lambda call: self._side_effect(req, node_id, call))
        node_req = replace(req, scope=self._scope(req, node), history=())
        loop = ReactLoop(EngineDeps(self.deps.llm, runner, self.deps.state), node_req, emit, step_id=node_id)
        limit = req.skill.spec.settings.strategy.max_turns
        turns = 0
        try:
            start = await self._start_messages(req, node, node_req, runner)
            if isinstance(start, NeedsApproval):
                return start
            messages = start
            while True:
                if turns >= limit:
                    return _Failed(f"no answer after {limit} turns (the skill's max_turns)")
                if not rounds.take():
                    return Interrupted("max_turns_exceeded", _rounds_text(req, rounds))
                turns += 1
                step = await _turn(loop, req, messages)
                if not isinstance(step, RunAgain):
                    return step
                messages = step.messages
        finally:
            self.tool_calls += loop.tool_calls
            # written with the node's next state (one record write fewer per node)
            self.plan = replace(
                self.plan,
                nodes=tuple(replace(n, turns=n.turns + turns) if n.id == node_id else n for n in self.plan.nodes),
            )

    async def _start_messages(
        self, req: EngineRequest, node: PlanNode, node_req: EngineRequest, runner: _Recorded
    ) -> tuple[Message, ...] | NeedsApproval:
        if node.pending_call is None:
            return initial_messages(node_req, self._node_task(req, node), system_extra=_NODE_NOTE)
        spec = node.pending_call
        call = ToolCall(str(spec["id"]), str(spec["name"]), dict(spec.get("arguments") or {}))
        approved = req.continuation.approved if req.continuation is not None else {}
        if call.id in approved:
            result = approved[call.id]
        else:  # another node's approval continued the run: this call asks again
            outcome = await runner.execute(node_req.scope, call, "llm")
            if isinstance(outcome, ToolNeedsApproval):
                return NeedsApproval(call, outcome.reason, node.checkpoint)
            result = outcome_text(outcome)
        await self._set(req, node.id, pending_call=None, checkpoint=())
        return (*node.checkpoint, {"role": "tool", "tool_call_id": call.id, "content": result})

    # -- plan state ----------------------------------------------------------------------

    def _current(self) -> list[PlanNode]:
        return [n for n in self.plan.nodes if n.revision == self.plan.revision or n.state == "completed"]

    def _node_of(self, node_id: str) -> PlanNode:
        node = self.plan.node(node_id)
        assert node is not None
        return node

    def _ready(self, exclude: Mapping[str, Any]) -> list[PlanNode]:
        done = {n.id for n in self.plan.nodes if n.state == "completed"}
        return [
            n
            for n in self.plan.nodes
            if n.id not in exclude
            and (n.state == "pending" or (n.state == "waiting_approval" and n.pending_call is not None))
            and set(n.depends_on) <= done
        ]

    async def _set(self, req: EngineRequest, node_id: str, **changes: Any) -> None:
        async with self._lock:
            nodes = tuple(replace(n, **changes) if n.id == node_id else n for n in self.plan.nodes)
            await self._write(req, replace(self.plan, nodes=nodes))

    async def _save(self, req: EngineRequest, plan: PlanRecord) -> None:
        async with self._lock:
            await self._write(req, plan)

    async def _write(self, req: EngineRequest, plan: PlanRecord) -> None:
        self.plan = plan
        if self.deps.state is not None:
            await self.deps.state.save_plan(req.run_id, plan)

    async def _side_effect(self, req: EngineRequest, node_id: str, call: ToolCall) -> None:
        node = self._node_of(node_id)
        await self._set(req, node_id, side_effects=(*node.side_effects, f"{call.name} {call.id}"))

    def _scope(self, req: EngineRequest, node: PlanNode) -> ToolScope:
        names = [s.name for s in self.deps.tools.visible(req.scope) if s.name in node.tools]
        return replace(req.scope, worker_allowed_tools=frozenset(names))

    def _node_task(self, req: EngineRequest, node: PlanNode) -> str:
        parts = [f"## The whole task\n{req.task}", f"## Your step: {node.id}\n{node.instruction}"]
        if node.expected_output:
            parts.append(f"Expected output: {node.expected_output}")
        for dep in node.depends_on:
            parts.append(f"## Result of step {dep}\n{self._node_of(dep).output}")
        return "\n\n".join(parts)

    def _answer(self) -> str:
        done = [n for n in self.plan.nodes if n.state == "completed"]
        needed = {d for n in done for d in n.depends_on}
        sinks = [n for n in done if n.id not in needed]
        if len(sinks) == 1:
            return sinks[0].output
        return "\n\n".join(f"## {n.id}\n{n.output}" for n in sinks)

    # -- ending ------------------------------------------------------------------------

    async def _stopped(self, req: EngineRequest, reason: str, text: str) -> RunResult:
        await self._save(req, replace(self.plan, status="failed"))
        if reason == "max_turns_exceeded":
            return RunResult("max_turns_exceeded", text, ENGINE, error=text, tool_calls=self.tool_calls)
        if reason == "budget_exceeded":
            return RunResult("budget_exceeded", text, ENGINE, error=text, tool_calls=self.tool_calls)
        return RunResult("failed", engine=ENGINE, error_code=reason, error=text, tool_calls=self.tool_calls)

    async def _over_tokens(self, req: EngineRequest) -> RunResult | None:
        spent = recorded_tokens()
        if req.budget is None or spent is None or spent < req.budget.token_budget:
            return None
        return await self._stopped(req, "budget_exceeded", _tokens_text(req, spent))

    async def _fail(self, req: EngineRequest, code: str, message: str) -> RunResult:
        await self._save(req, replace(self.plan, status="failed"))
        return RunResult("failed", engine=ENGINE, error_code=code, error=message, tool_calls=self.tool_calls)


async def _turn(loop: ReactLoop, req: EngineRequest, messages: tuple[Message, ...]) -> RunAgain | _NodeOutcome:
    """One turn of a node's sub-run: the conversation to go on with, or how the node ends."""
    try:
        outcome = await loop.turn(messages)
    except ProviderError as exc:
        if isinstance(exc, ContextOverflowError):
            raise
        return _Failed(f"model call failed: {exc.kind}: {exc}")
    match outcome:
        case RunAgain():
            spent = recorded_tokens()
            if req.budget is not None and spent is not None and spent >= req.budget.token_budget:
                return Interrupted("budget_exceeded", _tokens_text(req, spent))
            return outcome
        case FinalOutput(text=text) if text.strip().startswith(FAILED_MARK):
            return _Failed(text.strip().removeprefix(FAILED_MARK).strip() or "the step failed")
        case FinalOutput() | NeedsApproval():
            return outcome
        case Interrupted(reason="waiting"):
            return _Failed("a plan node cannot wait for an event; plan the work without waiting")
        case Interrupted():
            return outcome
        case _:
            assert_never(outcome)


def _now() -> datetime:
    return datetime.now(UTC)


def _carried(node: PlanNode) -> PlanNode:
    """A node of the run being continued, as this run takes it over: a node that was running when its
    run stopped runs again only if it recorded no side effect."""
    if node.state != "running":
        return node
    if node.side_effects:
        why = "its run stopped while it ran and these calls may have happened: " + "; ".join(node.side_effects)
        return replace(node, state="outcome_unknown", error=why)
    return replace(node, state="pending", started_at=None)


def _retired(node: PlanNode) -> PlanNode:
    """A node a re-plan replaces: pending and waiting ones never run."""
    return replace(node, state="skipped") if node.state in ("pending", "waiting_approval") else node


def _failure(failed: list[PlanNode] | None, what: str) -> str:
    names = "; ".join(f"{n.id}: {n.error}" for n in failed or ())
    return f"{what} (failed: {names})" if names else what


def _replan_request(plan: PlanRecord, failed: list[PlanNode]) -> str:
    state = [
        {"id": n.id, "instruction": n.instruction, "state": n.state, "result": n.output[:2000], "error": n.error}
        for n in plan.nodes
        if n.revision == plan.revision or n.state == "completed"
    ]
    failures = "; ".join(f"{n.id}: {n.error}" for n in failed)
    return (
        f"The plan so far:\n{json.dumps(state, ensure_ascii=False, indent=1)}\n\n"
        f"These steps failed: {failures}. Plan the remaining work with new node ids (JSON only); "
        "finished steps keep their results and can be depended on."
    )


def _shown(node: PlanNode) -> dict[str, Any]:
    return {"id": node.id, "depends_on": list(node.depends_on), "tools": list(node.tools)}


def _plain(messages: tuple[Message, ...]) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(json.dumps([dict(m) for m in messages], default=str)))


def _rounds_text(req: EngineRequest, rounds: _Rounds) -> str:
    depth = req.budget.depth if req.budget is not None else "run"
    return f"stopped: the plan used the {rounds.used} model calls the {depth} depth allows"


def _tokens_text(req: EngineRequest, spent: int) -> str:
    assert req.budget is not None
    allowed = req.budget.token_budget
    return f"stopped: the run's model calls used {spent} tokens, the {req.budget.depth} depth allows {allowed}"
