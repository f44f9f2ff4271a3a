"""Where a routed run's planning and LangGraph state goes: the plan and the graph's place in the run
record (through TaskLifecycle), LangGraph checkpoints in the worker's checkpoint store (files, or
Redis in the shared profile)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from genworker.ids import safe_join
from genworker.worker.engine_state import GraphRecord, PlanRecord
from genworker.worker.lifecycle import RunNotFound, TaskLifecycle
from genworker.worker.task import RunRef

__all__ = ["CheckpointStores", "RunEngineState", "checkpoint_stores"]

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
