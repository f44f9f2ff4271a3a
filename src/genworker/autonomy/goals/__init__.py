"""Goals: the GoalAggregate that edits goal files, the evaluator judging a run against its goal,
the projector writing verdicts back into goals, and the health check that measures deviation from
the deadlines."""

from genworker.autonomy.goals.aggregate import GOAL_UPDATED, GoalAggregate, GoalChange
from genworker.autonomy.goals.errors import GoalError, GoalFileError, GoalNotFound, GoalTransitionError
from genworker.autonomy.goals.evaluator import EVALUATOR_VERSION, GoalEvaluator, Target
from genworker.autonomy.goals.health import (
    GOAL_HEALTH_CHANGED,
    GOAL_OFF_TRACK,
    GoalHealth,
    GoalProgressChecker,
    goal_health,
)
from genworker.autonomy.goals.projector import (
    GOAL_EVALUATED,
    GOAL_VERDICT_INCONCLUSIVE,
    Evaluation,
    GoalProgressProjector,
    match_task,
    target_of,
)
from genworker.autonomy.goals.verdicts import LastVerdict, VerdictLog

__all__ = [
    "EVALUATOR_VERSION",
    "GOAL_EVALUATED",
    "GOAL_HEALTH_CHANGED",
    "GOAL_OFF_TRACK",
    "GOAL_UPDATED",
    "GOAL_VERDICT_INCONCLUSIVE",
    "Evaluation",
    "GoalAggregate",
    "GoalChange",
    "GoalError",
    "GoalEvaluator",
    "GoalFileError",
    "GoalHealth",
    "GoalNotFound",
    "GoalProgressChecker",
    "GoalProgressProjector",
    "GoalTransitionError",
    "LastVerdict",
    "Target",
    "VerdictLog",
    "goal_health",
    "match_task",
    "target_of",
]
