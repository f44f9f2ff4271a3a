"""Start-up recovery: runs the last process left running become `interrupted`; nothing is replayed.

A run that was running may have done a side-effecting step (sent a mail, paid an invoice) whose
outcome is unknown, so it is never re-run automatically: a person, or the next trigger with a new
idempotency key, decides. With several runtime processes on one workspace, runs carry their
owner's instance id and only runs whose owner lost its lease are touched (see leases.py).
"""

from __future__ import annotations

from pathlib import Path

from genworker.worker.lifecycle.task_aggregate import Clock, TaskLifecycle
from genworker.worker.task import RunRef

__all__ = ["recover_interrupted"]


async def recover_interrupted(workspace_root: Path, *, clock: Clock | None = None) -> list[RunRef]:
    """Mark every running/evaluating run under `workspace_root` interrupted; return their refs."""
    lifecycle = TaskLifecycle(workspace_root) if clock is None else TaskLifecycle(workspace_root, clock=clock)
    return await lifecycle.recover_interrupted()
