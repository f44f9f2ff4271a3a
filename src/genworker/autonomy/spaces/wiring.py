"""How the composition root builds the spaces service: each worker's settings from its files, the
router's model through the runtime's LLM client, the backend (files, or Redis in the shared
profile), and whether a space's last task run is still going
from the task lifecycle."""

from __future__ import annotations

from pathlib import Path

from redis import Redis

from genworker.autonomy.spaces.chooser import SpaceChooser
from genworker.autonomy.spaces.config import registry_settings
from genworker.autonomy.spaces.redis_store import RedisEventLog, RedisSpaceStore
from genworker.autonomy.spaces.router import ContextSpaceRouter
from genworker.autonomy.spaces.service import RunOpen, SpaceService
from genworker.llm.client import LLMClient
from genworker.memory.embeddings import MiniLMEmbedder, embeddings_available
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.errors import TaskFileError, TaskNotFound
from genworker.worker.task import RunRef
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["build_spaces", "run_open_in"]


def run_open_in(tasks: TaskLifecycle) -> RunOpen:
    async def run_open(tenant_id: str, worker_id: str, run_id: str) -> bool:
        try:
            run = await tasks.get_run(RunRef(tenant_id, worker_id, run_id))
        except (TaskNotFound, TaskFileError):
            return False
        return not run.terminal

    return run_open


def build_spaces(
    workspace: Path, registry: WorkspaceRegistry, llm: LLMClient, tasks: TaskLifecycle, redis: Redis | None = None
) -> SpaceService:
    """Files under the workspace, or Redis when the profile shares one."""
    router = ContextSpaceRouter(SpaceChooser(llm))
    shared = (RedisSpaceStore(redis), RedisEventLog(redis)) if redis is not None else (None, None)
    embed = MiniLMEmbedder() if embeddings_available() else None  # loads its model on first use only
    return SpaceService(
        workspace,
        router,
        registry_settings(registry),
        run_open=run_open_in(tasks),
        store=shared[0],
        log=shared[1],
        embed=embed,
    )
