"""TaskLifecycle commands: every transition through the aggregate, engine result mapping, facts
recorded on live runs, timings and history."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.engine.base import RunResult
from genworker.fsutil import LOCK_STRIPES
from genworker.llm.client import LLMCallRecord
from genworker.tools.base import ToolCall
from genworker.worker.lifecycle import (
    IllegalTransition,
    RunClosed,
    RunExists,
    RunNotFound,
    TaskExists,
    TaskLifecycle,
    TaskLifecycleError,
)
from genworker.worker.task import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    Deliverable,
    GoalStatus,
    ModelUsage,
    RunError,
    RunFallback,
    RunRecord,
    RunRef,
    RunState,
    StateChange,
    TaskManifest,
    TaskProvenance,
    ToolCallRecord,
    can_transition,
)
from genworker.write_journal import JournaledFiles

pytestmark = pytest.mark.anyio

S = RunState
T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
REF = RunRef("acme", "w", "r1")


class Ticker:
    """A clock that moves one second per reading."""

    def __init__(self) -> None:
        self.ticks = 0

    def __call__(self) -> datetime:
        self.ticks += 1
        return T0 + timedelta(seconds=self.ticks - 1)


def manifest(run_id: str = "r1", task_id: str = "t1", **provenance: object) -> TaskManifest:
    return TaskManifest(
        task_id,
        run_id,
        "acme",
        "w",
        "do it",
        T0,
        skill_id="s",
        provenance=TaskProvenance(**provenance),  # type: ignore[arg-type]
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def lifecycle(root: Path) -> TaskLifecycle:
    return TaskLifecycle(root, clock=Ticker())


def llm_call(model: str = "openai/m", prompt: int = 10, completion: int = 5) -> LLMCallRecord:
    return LLMCallRecord("task", "standard", "main", model, 50.0, prompt, completion, 0.001)


INVOICE = ToolCall("inv1", "send_invoice", {"customer": "Globex"})


# -- creation -----------------------------------------------------------------------


async def test_persist_initial_writes_manifest_and_queued_run(lifecycle: TaskLifecycle, root: Path) -> None:
    run = await lifecycle.persist_initial(manifest())
    worker = root / "tenants" / "acme" / "workers" / "w"
    assert (worker / "tasks" / "active" / "t1.json").is_file()
    assert (worker / "runs" / "r1.json").is_file()
    assert (run.state, run.version, run.skill_id, run.task_id) == (S.QUEUED, 1, "s", "t1")
    assert run.history == (StateChange(T0, None, S.QUEUED),)
    assert run.goal_status is GoalStatus.NOT_APPLICABLE
    assert await lifecycle.get_run(REF) == run
    assert await lifecycle.get_manifest("acme", "w", "t1") == manifest()


async def test_a_run_serving_a_goal_starts_inconclusive(lifecycle: TaskLifecycle) -> None:
    run = await lifecycle.persist_initial(manifest(goal_id="g1"))
    assert run.goal_status is GoalStatus.INCONCLUSIVE


async def test_run_and_task_ids_are_not_reused(lifecycle: TaskLifecycle, root: Path) -> None:
    await lifecycle.persist_initial(manifest())
    with pytest.raises(RunExists):
        await lifecycle.persist_initial(manifest(task_id="t2"))
    with pytest.raises(TaskExists):
        await lifecycle.persist_initial(manifest(run_id="r2"))
    active = root / "tenants" / "acme" / "workers" / "w" / "tasks" / "active"
    assert sorted(p.name for p in active.iterdir()) == ["t1.json"]
    with pytest.raises(RunNotFound):
        await lifecycle.get_run(RunRef("acme", "w", "r2"))


async def test_unknown_runs_are_reported(lifecycle: TaskLifecycle) -> None:
    with pytest.raises(RunNotFound, match="run acme/w/nope does not exist"):
        await lifecycle.start(RunRef("acme", "w", "nope"))


async def test_a_naive_clock_is_refused(root: Path) -> None:
    lifecycle = TaskLifecycle(root, clock=lambda: datetime(2025, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="timezone-aware"):
        await lifecycle.persist_initial(manifest())


# -- every transition through the aggregate -----------------------------------------

Step = Callable[[TaskLifecycle], Awaitable[RunRecord]]

REACH: dict[RunState, list[Step]] = {
    S.QUEUED: [],
    S.RUNNING: [lambda lc: lc.start(REF)],
    S.WAITING_APPROVAL: [lambda lc: lc.start(REF), lambda lc: lc.wait_approval(REF, INVOICE)],
    S.PAUSED: [lambda lc: lc.start(REF), lambda lc: lc.pause(REF, "supervisor gate")],
    S.EVALUATING: [lambda lc: lc.start(REF), lambda lc: lc.evaluate(REF)],
    S.COMPLETED: [lambda lc: lc.start(REF), lambda lc: lc.complete(REF, RunResult("completed", "done"))],
    S.FAILED: [lambda lc: lc.fail(REF, "boom", "it broke")],
    S.CANCELLED: [lambda lc: lc.cancel(REF, "user")],
    S.INTERRUPTED: [lambda lc: lc.interrupt(REF, "shutdown")],
    S.BUDGET_EXCEEDED: [lambda lc: lc.exceed_budget(REF, "tokens", "over 10k tokens")],
    S.SUPERSEDED: [lambda lc: lc.supersede(REF, "r9")],
}


def command_to(source: RunState, target: RunState) -> Step:
    """The aggregate command that asks for `target` from `source`."""
    commands: dict[RunState, Step] = {
        S.RUNNING: (lambda lc: lc.start(REF)) if source is S.QUEUED else (lambda lc: lc.resume(REF)),
        S.WAITING_APPROVAL: lambda lc: lc.wait_approval(REF, INVOICE),
        S.PAUSED: lambda lc: lc.pause(REF),
        S.EVALUATING: lambda lc: lc.evaluate(REF),
        S.COMPLETED: lambda lc: lc.complete(REF, RunResult("completed", "ok")),
        **{state: steps[-1] for state, steps in REACH.items() if state in TERMINAL_STATES - {S.COMPLETED}},
    }
    return commands[target]


async def reach(lifecycle: TaskLifecycle, state: RunState) -> RunRecord:
    run = await lifecycle.persist_initial(manifest())
    for step in REACH[state]:
        run = await step(lifecycle)
    assert run.state is state
    return run


# nothing moves a run back to queued (no command exists for it; the table forbids it too)
PAIRS = [(source, target) for source, target in itertools.product(RunState, RunState) if target is not S.QUEUED]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=str)
async def test_every_transition_through_the_aggregate(
    lifecycle: TaskLifecycle, source: RunState, target: RunState
) -> None:
    before = await reach(lifecycle, source)
    command = command_to(source, target)
    if can_transition(source, target):
        after = await command(lifecycle)
        assert after.state is target
        assert after.version == before.version + 1
        assert after.history[-1].source is source and after.history[-1].target is target
    else:
        with pytest.raises(IllegalTransition) as caught:
            await command(lifecycle)
        assert (caught.value.source, caught.value.target) == (source, target)
        assert f"from {source.value} to {target.value}" in str(caught.value)
        assert await lifecycle.get_run(REF) == before  # nothing written


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES), ids=str)
async def test_terminal_runs_take_no_more_facts(lifecycle: TaskLifecycle, root: Path, state: RunState) -> None:
    run = await reach(lifecycle, state)
    with pytest.raises(RunClosed, match=f"is {state.value}; cannot record tool call c1"):
        await lifecycle.record_tool_call(REF, ToolCallRecord("lookup", "c1", "completed", 3.0))
    with pytest.raises(RunClosed):
        await lifecycle.add_deliverable(REF, Deliverable("text", content="late"))
    assert await lifecycle.get_run(REF) == run
    worker = root / "tenants" / "acme" / "workers" / "w"
    assert not (worker / "tasks" / "active" / "t1.json").exists()
    assert (worker / "tasks" / "done" / "t1.json").is_file()


@pytest.mark.parametrize("state", sorted(ACTIVE_STATES), ids=str)
async def test_active_runs_keep_their_manifest_active(lifecycle: TaskLifecycle, root: Path, state: RunState) -> None:
    await reach(lifecycle, state)
    assert (root / "tenants" / "acme" / "workers" / "w" / "tasks" / "active" / "t1.json").is_file()


async def test_start_and_resume_only_from_their_own_states(lifecycle: TaskLifecycle) -> None:
    await reach(lifecycle, S.WAITING_APPROVAL)
    with pytest.raises(IllegalTransition, match="only from queued"):
        await lifecycle.start(REF)  # legal in the table, but resuming is not starting
    await lifecycle.resume(REF)
    with pytest.raises(IllegalTransition, match="only from waiting_approval, paused"):
        await lifecycle.resume(REF)


# -- engine results -----------------------------------------------------------------


async def started(lifecycle: TaskLifecycle, goal_id: str | None = None) -> RunRecord:
    await lifecycle.persist_initial(manifest(goal_id=goal_id))
    return await lifecycle.start(REF)


MAX_TURNS = RunError("max_turns_exceeded", "the engine reached its turn limit")
PROVIDER = RunError("provider_error", "timeout: upstream")

# RunResult -> (state, error, text deliverable (content, title) or None); goal status: see below
MAPPING = {
    "completed": (RunResult("completed", "Done.", "react"), S.COMPLETED, None, ("Done.", "")),
    "condition_stopped": (RunResult("condition_stopped", "Stop.", "workflow"), S.COMPLETED, None, ("Stop.", "")),
    "max_turns_exceeded": (
        RunResult("max_turns_exceeded", "Half way.", "react"),
        S.BUDGET_EXCEEDED,
        MAX_TURNS,
        ("Half way.", "partial output"),
    ),
    "supervisor_paused": (
        RunResult("supervisor_paused", "Half.", "react"),
        S.PAUSED,
        None,
        ("Half.", "partial output"),
    ),
    "supervisor_stopped": (
        RunResult("supervisor_stopped", "Half.", "react", error="stopped by supervisor 's'"),
        S.CANCELLED,
        RunError("supervisor_stopped", "stopped by supervisor 's'"),
        ("Half.", "partial output"),
    ),
    "failed": (RunResult("failed", "", "react", "provider_error", "timeout: upstream"), S.FAILED, PROVIDER, None),
    "failed-without-code": (RunResult("failed", error="?"), S.FAILED, RunError("engine_failed", "?"), None),
}


@pytest.mark.parametrize(("result", "state", "error", "text"), list(MAPPING.values()), ids=list(MAPPING))
async def test_complete_maps_engine_results(
    lifecycle: TaskLifecycle,
    result: RunResult,
    state: RunState,
    error: RunError | None,
    text: tuple[str, str] | None,
) -> None:
    await started(lifecycle)
    run = await lifecycle.complete(REF, result)
    assert (run.state, run.error, run.goal_status, run.engine) == (
        state,
        error,
        GoalStatus.NOT_APPLICABLE,
        result.engine,
    )
    assert run.deliverables == (() if text is None else (Deliverable("text", text[0], title=text[1]),))
    assert run.pending_approval is None


async def test_completed_goal_run_stays_inconclusive_unless_judged(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle, goal_id="g1")
    run = await lifecycle.complete(REF, RunResult("completed", "ok"))
    assert (run.state, run.goal_status) == (S.COMPLETED, GoalStatus.INCONCLUSIVE)  # completed != goal met


async def test_evaluation_then_a_judged_goal(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle, goal_id="g1")
    assert (await lifecycle.evaluate(REF)).state is S.EVALUATING
    run = await lifecycle.complete(REF, RunResult("completed", "ok"), goal_status=GoalStatus.NOT_MET)
    assert (run.state, run.goal_status) == (S.COMPLETED, GoalStatus.NOT_MET)


async def test_condition_stopped_takes_an_explicit_goal_status(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle, goal_id="g1")
    run = await lifecycle.complete(REF, RunResult("condition_stopped"), goal_status=GoalStatus.MET)
    assert (run.state, run.goal_status, run.deliverables) == (S.COMPLETED, GoalStatus.MET, ())


async def test_complete_needs_a_started_run(lifecycle: TaskLifecycle) -> None:
    await lifecycle.persist_initial(manifest())
    with pytest.raises(IllegalTransition, match="from queued to completed"):
        await lifecycle.complete(REF, RunResult("completed", "too early"))


async def test_usage_and_fallback_are_recorded(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle)
    result = RunResult(
        "completed",
        "ok",
        "react",
        llm_calls=(llm_call("openai/a", 100, 20), llm_call("openai/b", 7, 3)),
        fallback={"from": "langgraph", "to": "autonomous", "reason": "langgraph is not available"},
    )
    run = await lifecycle.complete(REF, result)
    assert [(u.model, u.prompt_tokens, u.completion_tokens) for u in run.model_usage] == [
        ("openai/a", 100, 20),
        ("openai/b", 7, 3),
    ]
    assert run.model_usage[0] == ModelUsage("task", "standard", "main", "openai/a", 50.0, 100, 20, 0.001)
    assert run.fallback == RunFallback("langgraph", "autonomous", "langgraph is not available")


# -- approval -----------------------------------------------------------------------


async def test_approval_round_trip_accumulates_usage(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle)
    waiting = await lifecycle.complete(
        REF,
        RunResult("approval_required", engine="react", llm_calls=(llm_call(),), pending_approval=INVOICE),
    )
    assert waiting.state is S.WAITING_APPROVAL
    assert waiting.pending_approval is not None
    assert (waiting.pending_approval.call_id, waiting.pending_approval.tool) == ("inv1", "send_invoice")
    resumed = await lifecycle.resume(REF, approval_ref="approval:42")
    assert (resumed.state, resumed.pending_approval, resumed.provenance.approval_ref) == (
        S.RUNNING,
        None,
        "approval:42",
    )
    assert resumed.history[-1].note == "approved"
    done = await lifecycle.complete(REF, RunResult("completed", "sent", "react", llm_calls=(llm_call(),)))
    assert done.state is S.COMPLETED and len(done.model_usage) == 2
    assert done.timings.started_at == resumed.timings.started_at  # the first start counts


async def test_wait_approval_records_the_pending_call(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle)
    run = await lifecycle.wait_approval(REF, INVOICE, "writes money")
    assert run.pending_approval is not None
    assert (run.pending_approval.reason, run.history[-1].note) == ("writes money", "approval for send_invoice")
    rejected = await lifecycle.cancel(REF, "rejected by owner")
    assert (rejected.state, rejected.pending_approval) == (S.CANCELLED, None)


async def test_approval_required_without_a_call_is_misuse(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle)
    with pytest.raises(TaskLifecycleError, match="without a pending tool call"):
        await lifecycle.complete(REF, RunResult("approval_required"))
    assert (await lifecycle.get_run(REF)).state is S.RUNNING


# -- facts, timings, history ----------------------------------------------------------


async def test_tool_calls_and_deliverables_on_a_live_run(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle)
    await lifecycle.record_tool_call(REF, ToolCallRecord("lookup", "c1", "completed", 12.5))
    await lifecycle.record_tool_call(REF, ToolCallRecord("send", "c2", "denied", 0.4, "posture"))
    await lifecycle.add_deliverable(REF, Deliverable("file", ref="out/report.md", title="report"))
    run = await lifecycle.complete(REF, RunResult("completed", "summary"))
    assert [(c.name, c.outcome) for c in run.tool_calls] == [("lookup", "completed"), ("send", "denied")]
    assert [d.kind for d in run.deliverables] == ["file", "text"]
    assert run.version == 6


async def test_timings_and_history(lifecycle: TaskLifecycle) -> None:
    # clock readings: persist 0s, start 1s, complete 2s
    await lifecycle.persist_initial(manifest())
    await lifecycle.start(REF)
    run = await lifecycle.complete(REF, RunResult("completed", "ok"))
    t = run.timings
    assert (t.queued_at, t.started_at, t.finished_at) == (T0, T0 + timedelta(seconds=1), T0 + timedelta(seconds=2))
    assert (t.queue_ms, t.run_ms, t.total_ms) == (1000.0, 1000.0, 2000.0)
    assert [(h.source, h.target) for h in run.history] == [
        (None, S.QUEUED),
        (S.QUEUED, S.RUNNING),
        (S.RUNNING, S.COMPLETED),
    ]


async def test_a_run_cancelled_before_starting_has_no_run_time(lifecycle: TaskLifecycle) -> None:
    await lifecycle.persist_initial(manifest())
    run = await lifecycle.cancel(REF, "no longer needed")
    assert (run.timings.started_at, run.timings.run_ms, run.timings.total_ms) == (None, None, 1000.0)
    assert run.history[-1].note == "no longer needed"


async def test_failures_carry_an_error(lifecycle: TaskLifecycle) -> None:
    await started(lifecycle)
    run = await lifecycle.fail(REF, "tool_crashed", "send_invoice raised KeyError")
    assert run.error == RunError("tool_crashed", "send_invoice raised KeyError")
    assert run.state is S.FAILED


async def test_runs_through_the_write_journal_leave_a_bounded_set_of_lock_files(root: Path) -> None:
    """Each run is locked for its state changes; the lock files are striped, not one per run.
    Through the write journal the writes run on the event loop and are durable on return."""
    files = JournaledFiles(root)
    try:
        journaled = TaskLifecycle(root, clock=Ticker(), files=files)
        for i in range(100):
            await journaled.persist_initial(manifest(f"r{i}", f"t{i}"), start=True)
            done = await journaled.complete(RunRef("acme", "w", f"r{i}"), RunResult("completed", "ok"))
            assert done.state is S.COMPLETED
    finally:
        files.close()
    worker = root / "tenants" / "acme" / "workers" / "w"
    assert len(list((worker / "runs").glob("r*.json"))) == 100
    assert len(list((worker / "tasks" / "done").glob("t*.json"))) == 100
    assert 1 < len(list((worker / "runs" / ".locks").iterdir())) <= LOCK_STRIPES
