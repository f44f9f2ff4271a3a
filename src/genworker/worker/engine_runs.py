"""Where a routed run's planning and LangGraph state goes: the plan and the graph's place in the run
record (through TaskLifecycle), LangGraph checkpoints in the worker's checkpoint store (files, or
Redis in the shared profile)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genworker.engine.state import GraphRecord, PlanRecord
from genworker.ids import safe_join
from genworker.worker.lifecycle import RunNotFound, TaskLifecycle
from genworker.worker.task import RunRef, RunState

if TYPE_CHECKING:
    from genworker.worker.routing import RouteRequest

__all__ = ["CheckpointStores", "NotContinuable", "RunEngineState", "checkpoint_stores", "continuation_request"]

CheckpointStores = Callable[[str, str], Any]
"""(tenant_id, worker_id) -> that worker's LangGraph CheckpointBackend."""


def checkpoint_stores(workspace_root: Path, redis_client: Any | None = None) -> CheckpointStores:
    """Files under each worker's runtime/graphs/, or Redis when the runtime shares state through it.
    The backends import LangGraph's checkpoint base only when first asked for (the optional extra)."""

    def backend(tenant_id: str, worker_id: str) -> Any:
        from genworker.engine.langgraph.checkpointer import FileCheckpoints, RedisCheckpoints

        if redis_client is not None:
            return RedisCheckpoints(redis_client, tenant_id, worker_id)
        return FileCheckpoints(safe_join(workspace_root, "tenants", tenant_id, "workers", worker_id))

    return backend


class RunEngineState:
    """`EngineState` for the runs of one worker."""

    def __init__(self, tasks: TaskLifecycle, tenant_id: str, worker_id: str, stores: CheckpointStores) -> None:
        self.tasks, self.tenant_id, self.worker_id, self.stores = tasks, tenant_id, worker_id, stores
        self._backend: Any = None

    def _ref(self, run_id: str) -> RunRef:
        return RunRef(self.tenant_id, self.worker_id, run_id)

    async def save_plan(self, run_id: str, plan: Any) -> None:
        assert isinstance(plan, PlanRecord)
        await self.tasks.record_plan(self._ref(run_id), plan)

    async def load_plan(self, run_id: str) -> PlanRecord | None:
        try:
            return (await self.tasks.get_run(self._ref(run_id))).plan
        except RunNotFound:
            return None

    async def save_graph(self, run_id: str, graph: Any) -> None:
        assert isinstance(graph, GraphRecord)
        await self.tasks.record_graph(self._ref(run_id), graph)

    async def load_graph(self, run_id: str) -> GraphRecord | None:
        try:
            return (await self.tasks.get_run(self._ref(run_id))).graph
        except RunNotFound:
            return None

    def checkpoints(self) -> Any:
        if self._backend is None:
            self._backend = self.stores(self.tenant_id, self.worker_id)
        return self._backend


class NotContinuable(ValueError):
    """The run has no plan or graph a new run could continue (or is not interrupted)."""


async def continuation_request(tasks: TaskLifecycle, ref: RunRef) -> RouteRequest:
    """The request that continues `ref`, an interrupted planning or LangGraph run (its process died):
    the same task and skill, routed again with the run's plan or graph thread (`Continuation`). Its
    idempotency key makes one continuation per interrupted run. NotContinuable says why not."""
    from genworker.engine.base import Continuation
    from genworker.worker.routing import RouteRequest

    run = await tasks.get_run(ref)
    if run.state is not RunState.INTERRUPTED:
        raise NotContinuable(f"run {ref.run_id} is {run.state.value}: only an interrupted run is continued")
    if run.plan is None and run.graph is None:
        raise NotContinuable(f"run {ref.run_id} ({run.engine or 'no engine'}) kept no plan or graph to continue")
    manifest = await tasks.get_manifest(ref.tenant_id, ref.worker_id, run.task_id)
    p = run.provenance
    return RouteRequest(
        ref.tenant_id,
        ref.worker_id,
        manifest.text,
        p.source_type,  # type: ignore[arg-type]  # recorded from a SourceType
        p.source_id,
        run.thread_id,
        conversational=False,
        skill_id=run.skill_id,
        duty_id=p.duty_id,
        trigger_id=p.trigger_id,
        goal_id=p.goal_id,
        approval_ref=p.approval_ref,
        idempotency_key=f"continue:{ref.run_id}",
        continuation=Continuation(ref.run_id),
    )
