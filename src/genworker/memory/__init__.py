"""Memory: episodes as Markdown files (the source of truth), an embedded SQLite FTS5 index
rebuilt from them at will, optional embeddings, preferences and decisions with explicit
supersession, partitions, candidates, consolidation, redaction and cross-channel recall."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from genworker.memory.config import MemoryConfig
from genworker.memory.consolidation import ConsolidationReport, consolidate, consolidate_workspace
from genworker.memory.errors import MemoryFileError, MemoryPolicyError, MemoryStoreError
from genworker.memory.models import Episode, LayerBudget, MemoryBinding, MemoryHit, MemoryQuery, Scope, ScopeKind
from genworker.memory.orchestrator import MemoryOrchestrator, MemoryProvider, RecallResult
from genworker.memory.service import MemoryService, RunOutcome, channel_of

__all__ = [
    "ConsolidationReport",
    "Episode",
    "LayerBudget",
    "MemoryBinding",
    "MemoryConfig",
    "MemoryFileError",
    "MemoryHit",
    "MemoryOrchestrator",
    "MemoryPolicyError",
    "MemoryProvider",
    "MemoryQuery",
    "MemoryService",
    "MemoryStoreError",
    "RecallResult",
    "RunOutcome",
    "Scope",
    "ScopeKind",
    "channel_of",
    "consolidate",
    "consolidate_workspace",
    "reindex",
]


def reindex(
    workspace_root: Path,
    tenant_id: str,
    worker_id: str,
    progress: Callable[[int, int], None] | None = None,
    *,
    config: MemoryConfig | None = None,
) -> int:
    """Rebuild the worker's memory index from its episode files; the number of episodes indexed.

    Uses GENWORKER_MEMORY_EMBEDDINGS from the environment unless `config` is given.
    """
    service = MemoryService(workspace_root, config or MemoryConfig.from_values(os.environ))
    try:
        owner = service.worker(tenant_id, worker_id)
        if not owner.episodes.memory_dir.parent.is_dir():
            raise FileNotFoundError(f"no worker {worker_id!r} in tenant {tenant_id!r} under {workspace_root}")
        return owner.reindex(progress)
    finally:
        service.close()
