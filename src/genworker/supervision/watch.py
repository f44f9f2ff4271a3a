"""RunWatcher: the policies attached to one run, beside its engine. It wraps the run's tools (a call
a policy refuses is denied before it runs), sees every engine event (counting, the answer checks, the
model reviewer) and answers the engine's guard between turns with the stop it decided."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any, Literal

from genworker.engine.base import Interrupted, ToolRunner
from genworker.engine.events import Custom, Emit, EngineEvent, RunError, RunFinished, TextDelta, ToolCallResult
from genworker.llm.client import LLMClient, recorded_tokens
from genworker.supervision.checks import Counters, check_answer, check_call, check_limits, check_result
from genworker.supervision.decisions import Decision, SupervisorState, advance
from genworker.supervision.policy import SupervisorPolicy
from genworker.supervision.reviewer import Reviewer, Step
from genworker.tools.base import ToolCall, ToolSpec
from genworker.tools.context import Caller, ToolScope
from genworker.tools.outcomes import ToolDenied, ToolOutcome

__all__ = ["RECORD_VERSION", "RunWatcher", "SupervisedTools"]

RECORD_VERSION = 1
RequestReview = Callable[[Decision], Awaitable[str]]  # -> the confirmation id
Store = Callable[[dict[str, Any]], Awaitable[None]]
_ENDING = ("pause", "stop", "request_review")


class RunWatcher:
    def __init__(
        self,
        run_id: str,
        task: str,
        policies: list[SupervisorPolicy],
        llm: LLMClient,
        request_review: RequestReview,
        store: Store,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_id, self.task, self.policies, self.clock = run_id, task, policies, clock
        self._request_review, self._store = request_review, store
        self.counters = Counters(started=clock())
        self.state = advance(SupervisorState.INACTIVE, "start")
        self.decisions: list[dict[str, Any]] = []
        self.steps: list[Step] = []
        self._args: dict[str, str] = {}
        self._stop: Interrupted | None = None
        self._emit: Emit | None = None
        self._seen = 0  # tool results seen, for sampling
        self.reviewers = {
            p.name: Reviewer(llm, p.model.tier, p.model.max_calls, p.name) for p in policies if p.model.enabled
        }

    # -- the engine's hooks ----------------------------------------------------------

    def tools(self, inner: ToolRunner) -> ToolRunner:
        return SupervisedTools(inner, self)

    def observe(self, downstream: Emit) -> Emit:
        self._emit = downstream

        async def emit(event: EngineEvent) -> None:
            await self._see(event)
            await downstream(event)

        return emit

    async def guard(self) -> Interrupted | None:
        if self._stop is None:
            await self._limits()
        return self._stop

    # -- deciding ----------------------------------------------------------------------

    async def before_call(self, call: ToolCall) -> Decision | None:
        """The first decision that refuses the call (pause, stop, request_review); warnings are sent on."""
        await self._limits()
        if self._stop is not None:
            return Decision("stop", "stopped", "the supervisor already stopped this run", (call.id,))
        self._args[call.id] = json.dumps(call.arguments, ensure_ascii=False, default=str)
        for policy in self.policies:
            decision = check_call(policy, self.counters, call.id, call.name, call.arguments)
            if decision is not None:
                await self.decide(decision)
                if decision.action in _ENDING:
                    return decision
        self.counters.tool_calls += 1
        self.counters.last_tool = call.name
        return None

    async def decide(self, decision: Decision) -> None:
        if decision.action == "continue":
            return
        entry: dict[str, Any] = {**asdict(decision), "cites": list(decision.cites), "source": _source(decision)}
        if decision.action == "request_review":
            entry["confirmation_id"] = await self._request_review(decision)
        if decision.action in ("pause", "stop") and self._stop is None:
            paused = decision.action == "pause"
            verb = "paused" if paused else "stopped"
            reason: Literal["budget_exceeded", "supervisor_paused", "supervisor_stopped"] = (
                "budget_exceeded" if decision.budget else "supervisor_paused" if paused else "supervisor_stopped"
            )
            self._stop = Interrupted(
                reason, f"{verb} by supervisor {decision.policy!r} ({decision.check}): {decision.reason}"
            )
        self.state = advance(self.state, decision.action)
        entry["state"] = self.state.value
        self.decisions.append(entry)
        if self._emit is not None:
            name = "supervisor_comment" if entry["source"] == "model" else "supervisor_decision"
            await self._emit(Custom(name, {"run_id": self.run_id, **entry}))

    async def _limits(self) -> None:
        tokens = recorded_tokens()
        for policy in self.policies:
            decision = check_limits(policy, self.counters, self.clock(), tokens)
            if decision is not None:
                await self.decide(decision)
                return

    async def _see(self, event: EngineEvent) -> None:
        match event:
            case TextDelta(text=text):
                self.counters.output_chars += len(text)
            case ToolCallResult(call_id=call_id, name=name, outcome=outcome, content=content):
                self.steps.append(Step(call_id, name, self._args.get(call_id, ""), content))
                if outcome in ("failed", "denied"):
                    self.counters.failures += 1
                    for policy in self.policies:
                        if (decision := check_result(policy, self.counters, call_id)) is not None:
                            await self.decide(decision)
                self._seen += 1
                await self._review("tool_result", None)
            case RunFinished(output=output):
                if event.outcome == "completed":
                    for policy in self.policies:
                        if (decision := check_answer(policy, output)) is not None:
                            await self.decide(decision)
                    await self._review("final", output)
                await self._end()
            case RunError():
                await self._end()
            case _:
                pass

    async def _review(self, on: str, output: str | None) -> None:
        for policy in self.policies:
            reviewer = self.reviewers.get(policy.name)
            if reviewer is None or on not in policy.model.events:
                continue
            if on == "tool_result" and self._seen % policy.model.sample_every:
                continue
            for decision in await reviewer.review(self.task, self.steps, output):
                await self.decide(decision)

    async def _end(self) -> None:
        if self.state is SupervisorState.OBSERVING:
            self.state = advance(self.state, "resolve")
        await self._store(self.record())

    def record(self) -> dict[str, Any]:
        return {
            "schema_version": RECORD_VERSION,
            "run_id": self.run_id,
            "policies": [p.name for p in self.policies],
            "state": self.state.value,
            "decisions": self.decisions,
            "counters": asdict(self.counters) | {"started": None},
            "model_review": {"calls": sum(r.calls for r in self.reviewers.values()),
                             "ms": round(sum(r.ms for r in self.reviewers.values()), 1)},
        }  # fmt: skip


def _source(decision: Decision) -> str:
    return "model" if decision.check.startswith("model:") else "rules"


class SupervisedTools:
    """The run's tools with the supervisor in front of every model-made call."""

    def __init__(self, inner: ToolRunner, watcher: RunWatcher) -> None:
        self.inner, self.watcher = inner, watcher

    def visible(self, scope: ToolScope) -> list[ToolSpec]:
        return self.inner.visible(scope)

    async def execute(self, scope: ToolScope, call: ToolCall, caller: Caller = "llm") -> ToolOutcome:
        refused = await self.watcher.before_call(call) if caller == "llm" else None
        if refused is not None:
            return ToolDenied("hook", f"refused by supervisor {refused.policy!r}: {refused.reason}")
        counters = self.watcher.counters
        counters.in_flight += 1
        try:
            return await self.inner.execute(scope, call, caller)
        finally:
            counters.in_flight -= 1
