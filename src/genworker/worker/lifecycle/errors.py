"""Errors of the task lifecycle: misuse (illegal transitions, unknown runs) and unreadable files."""

from __future__ import annotations

from pathlib import Path

from genworker.worker.task import RunRef, RunState

__all__ = [
    "IllegalTransition",
    "RunClosed",
    "RunExists",
    "RunNotFound",
    "TaskExists",
    "TaskFileError",
    "TaskLifecycleError",
    "TaskNotFound",
]


class TaskLifecycleError(Exception):
    """Base of every task lifecycle error."""


class IllegalTransition(TaskLifecycleError):
    """A run cannot move from its current state to the one asked for."""

    def __init__(self, ref: RunRef, source: RunState, target: RunState, detail: str = "") -> None:
        self.ref = ref
        self.source = source
        self.target = target
        extra = f": {detail}" if detail else ""
        super().__init__(f"run {ref}: illegal transition from {source.value} to {target.value}{extra}")


class RunClosed(TaskLifecycleError):
    """A finished run cannot take more tool calls or deliverables."""

    def __init__(self, ref: RunRef, state: RunState, what: str) -> None:
        self.ref = ref
        self.state = state
        super().__init__(f"run {ref} is {state.value}; cannot {what}")


class RunNotFound(TaskLifecycleError, LookupError):
    def __init__(self, ref: RunRef) -> None:
        self.ref = ref
        super().__init__(f"run {ref} does not exist")


class TaskNotFound(TaskLifecycleError, LookupError):
    def __init__(self, tenant_id: str, worker_id: str, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {tenant_id}/{worker_id}/{task_id} does not exist")


class RunExists(TaskLifecycleError):
    def __init__(self, ref: RunRef) -> None:
        self.ref = ref
        super().__init__(f"run {ref} already exists")


class TaskExists(TaskLifecycleError):
    def __init__(self, tenant_id: str, worker_id: str, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"task {tenant_id}/{worker_id}/{task_id} already exists")


class TaskFileError(TaskLifecycleError):
    """A task, run or idempotency file cannot be read: corrupt JSON, unknown schema_version or bad fields."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")
