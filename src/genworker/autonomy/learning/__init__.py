"""Learning from feedback (Steward): feedback on decisions becomes versioned policy changes that run
in shadow first, are applied by a person and rolled back in one command (docs/learning.md)."""

from genworker.autonomy.learning.gate import LearnedGateOverlay, learned_decision
from genworker.autonomy.learning.learner import (
    Learner,
    LearningRefused,
    PolicyVersionNotFound,
    Proposals,
    new_feedback_id,
)
from genworker.autonomy.learning.models import (
    FeedbackEvent,
    FeedbackSource,
    FeedbackType,
    LearningFileError,
    LearningState,
    PolicyChange,
    PolicyVersion,
)
from genworker.autonomy.learning.service import LearningService, build_learning
from genworker.autonomy.learning.store import LearningStore

__all__ = [
    "FeedbackEvent",
    "FeedbackSource",
    "FeedbackType",
    "LearnedGateOverlay",
    "Learner",
    "LearningFileError",
    "LearningRefused",
    "LearningService",
    "LearningState",
    "LearningStore",
    "PolicyChange",
    "PolicyVersion",
    "PolicyVersionNotFound",
    "Proposals",
    "build_learning",
    "learned_decision",
    "new_feedback_id",
]
