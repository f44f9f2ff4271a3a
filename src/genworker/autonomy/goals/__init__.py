"""Goals: the GoalAggregate that edits goal files, the projector writing run results back into
them, and the health check that measures deviation from the deadlines."""

from genworker.autonomy.goals.aggregate import GOAL_UPDATED, GoalAggregate, GoalChange
from genworker.autonomy.goals.errors import GoalError, GoalFileError, GoalNotFound, GoalTransitionError
from genworker.autonomy.goals.health import (
    GOAL_HEALTH_CHANGED,
    GOAL_OFF_TRACK,
    GoalHealth,
    GoalProgressChecker,
    goal_health,
)
from genworker.autonomy.goals.projector import GoalProgressProjector, match_task

__all__ = [
    "GOAL_HEALTH_CHANGED",
    "GOAL_OFF_TRACK",
    "GOAL_UPDATED",
    "GoalAggregate",
    "GoalChange",
    "GoalError",
    "GoalFileError",
    "GoalHealth",
    "GoalNotFound",
    "GoalProgressChecker",
    "GoalProgressProjector",
    "GoalTransitionError",
    "goal_health",
    "match_task",
]
