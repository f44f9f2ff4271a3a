"""Suggestions: pending proposals from detectors (repeated task, goal completion, duty drift, rule ->
skill), decided by a person; approving one applies it (a SKILL.md, a learned rule, a goal)."""

from genworker.autonomy.suggestions.aggregate import SuggestionAggregate, render_rule, render_skill
from genworker.autonomy.suggestions.detectors import DetectorSettings, SuggestionDetectors
from genworker.autonomy.suggestions.store import (
    FeedbackStore,
    Suggestion,
    SuggestionDecided,
    SuggestionNotFound,
    SuggestionStore,
)

__all__ = [
    "DetectorSettings",
    "FeedbackStore",
    "Suggestion",
    "SuggestionAggregate",
    "SuggestionDecided",
    "SuggestionDetectors",
    "SuggestionNotFound",
    "SuggestionStore",
    "render_rule",
    "render_skill",
]
