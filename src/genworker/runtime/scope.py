"""Which workers this process runs the autonomy loop of (issue #30, docs/deploy.md).

A single process runs every worker's heartbeat, sensors, duty schedules, briefs and goal checks.
Processes that share one Redis (the shared profile) split them: each worker is owned by exactly
one live process (`cluster/ownership.py`: rendezvous hashing over the live instance leases, and a
claim in Redis that only one process holds at a time). `AutonomyScope.workers()` is the registry's
workers this process holds the claim of; `beat()` refreshes the claims and says whether that set
changed, so the schedulers can follow. Chat and API requests are served by any process.
"""

from __future__ import annotations

import logging

from genworker.cluster.ownership import Ownership
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

__all__ = ["AutonomyScope"]

log = logging.getLogger("genworker.runtime")


class AutonomyScope:
    """The workers whose autonomy loop runs here: all of them, or those `ownership` holds."""

    def __init__(self, registry: WorkspaceRegistry, ownership: Ownership | None = None) -> None:
        self.registry = registry
        self.ownership = ownership

    @property
    def shared(self) -> bool:
        return self.ownership is not None

    def runs_here(self, tenant_id: str, worker_id: str) -> bool:
        return self.ownership is None or self.ownership.holds(tenant_id, worker_id)

    def workers(self) -> list[Worker]:
        everyone = self.registry.workers()
        if self.ownership is None:
            return everyone
        return [w for w in everyone if self.runs_here(w.tenant_id, w.worker_id)]

    async def beat(self) -> bool:
        """Refresh the live set and this process's claims; True when the workers it holds changed."""
        if self.ownership is None:
            return False
        before = self.ownership.held
        held = await self.ownership.beat((w.tenant_id, w.worker_id) for w in self.registry.workers())
        if held != before:
            gained, lost = sorted(held - before), sorted(before - held)
            log.info("[Runtime] autonomy of %d workers here; took %s, gave up %s", len(held), gained, lost)
        return held != before

    async def release(self) -> None:
        """Give up every claim at once (the process stops), so the next owners need not wait."""
        if self.ownership is not None:
            await self.ownership.release_all()

    def describe(self) -> dict[str, object]:
        if self.ownership is None:
            return {"mode": "single process: every worker's autonomy runs here"}
        return {
            "mode": "shared: each worker's autonomy runs on the one live process that holds its claim",
            "instance": self.ownership.instance_id,
            "live_instances": sorted(self.ownership.live),
            "workers_here": sorted(self.ownership.held),
        }
