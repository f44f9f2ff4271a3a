"""Task lifecycle: the aggregate that alone persists task manifests and run records and moves runs
through their state machine, its file store, start-up recovery and the tool-call recorder."""

from genworker.worker.lifecycle.errors import (
    IllegalTransition,
    RunClosed,
    RunExists,
    RunNotFound,
    TaskExists,
    TaskFileError,
    TaskLifecycleError,
    TaskNotFound,
)
from genworker.worker.lifecycle.recovery import recover_interrupted
from genworker.worker.lifecycle.task_aggregate import RESTART_NOTE, Clock, TaskLifecycle
from genworker.worker.lifecycle.tool_calls import RunToolCallSink

__all__ = [
    "RESTART_NOTE",
    "Clock",
    "IllegalTransition",
    "RunClosed",
    "RunExists",
    "RunNotFound",
    "RunToolCallSink",
    "TaskExists",
    "TaskFileError",
    "TaskLifecycle",
    "TaskLifecycleError",
    "TaskNotFound",
    "recover_interrupted",
]
