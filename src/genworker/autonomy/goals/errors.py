"""What goal commands raise: misuse (unknown goal, illegal move) apart from file trouble."""

from __future__ import annotations

__all__ = ["GoalError", "GoalFileError", "GoalNotFound", "GoalTransitionError"]


class GoalError(Exception):
    """Base of every goal error."""


class GoalNotFound(GoalError, LookupError):
    def __init__(self, tenant_id: str, worker_id: str, goal_id: str, what: str = "goal") -> None:
        self.goal_id = goal_id
        super().__init__(f"no {what} {goal_id!r} for {tenant_id}/{worker_id}")


class GoalTransitionError(GoalError, ValueError):
    """The command does not apply to the goal as it stands (e.g. approving an active goal)."""


class GoalFileError(GoalError):
    """The goal file cannot be read, or the edit would make it invalid; names the file."""

    def __init__(self, rel: str, message: str) -> None:
        self.rel = rel
        super().__init__(f"{rel}: {message}")
