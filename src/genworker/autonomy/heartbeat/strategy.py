"""HeartbeatStrategy: what the heartbeat does with one inbox item — summary, task or isolated run.

The default table, first row that applies wins:

====  ==================================================================  ==========
 #    the item                                                            decision
====  ==================================================================  ==========
 1    ``route`` is ``task``                                               task
 2    ``route`` is ``isolated``                                           isolated
 3    ``route`` is ``summary``                                            summary
 4    a goal item whose action is in ``heartbeat.goal_isolated_actions``  isolated
 5    a goal item whose action is in ``heartbeat.goal_task_actions``      task
 6    a goal item whose ``deviation`` exceeds
      ``heartbeat.goal_isolated_deviation_threshold``                     isolated
 7    anything else (no route, a custom route such as ``goal``)           summary
====  ==================================================================  ==========

A *goal item* has an ``event_type`` starting with ``goal.``; its action is the payload's ``action``
(or ``recommended_action``) and its deviation the payload's numeric ``deviation``. The route comes
from the sensor's routing rules, so a rule the persona author wrote beats the goal settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from genworker.autonomy.inbox import InboxItem
from genworker.workspace.models.persona import HeartbeatConfig

__all__ = [
    "ROUTE_ISOLATED",
    "ROUTE_SUMMARY",
    "ROUTE_TASK",
    "Decision",
    "DefaultHeartbeatStrategy",
    "Dismiss",
    "HeartbeatStrategy",
    "RunIsolated",
    "SubmitTask",
    "Summarize",
    "goal_action",
    "goal_deviation",
    "preferred_skills",
]

ROUTE_SUMMARY: Final = "summary"
ROUTE_TASK: Final = "task"
ROUTE_ISOLATED: Final = "isolated"


@dataclass(frozen=True, slots=True)
class Summarize:
    """Look at it in the main session's next cognition turn (batched with the other summary items)."""

    reason: str


@dataclass(frozen=True, slots=True)
class SubmitTask:
    """Start a standard task through the router."""

    reason: str
    preferred_skill_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RunIsolated:
    """Start an isolated run in its own thread that reports back to the main session."""

    reason: str
    preferred_skill_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Dismiss:
    """Nothing to do: consume the item quietly — no model call, no message, no run."""

    reason: str


Decision = Summarize | SubmitTask | RunIsolated | Dismiss


class HeartbeatStrategy(Protocol):
    def decide_action(self, item: InboxItem, config: HeartbeatConfig) -> Decision: ...


def goal_action(item: InboxItem) -> str | None:
    for name in ("action", "recommended_action"):
        value = item.payload.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def goal_deviation(item: InboxItem) -> float | None:
    value = item.payload.get("deviation")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def preferred_skills(item: InboxItem) -> tuple[str, ...]:
    """``preferred_skill_ids`` (a list) or ``skill_id`` from the item's metadata, then its payload."""
    for source in (item.metadata, item.payload):
        found = _skills_in(source)
        if found:
            return found
    return ()


def _skills_in(source: Mapping[str, Any]) -> tuple[str, ...]:
    listed = source.get("preferred_skill_ids")
    if isinstance(listed, tuple | list):
        return tuple(dict.fromkeys(s for s in listed if isinstance(s, str) and s))
    single = source.get("skill_id")
    return (single,) if isinstance(single, str) and single else ()


class DefaultHeartbeatStrategy:
    def decide_action(self, item: InboxItem, config: HeartbeatConfig) -> Decision:
        skills = preferred_skills(item)
        if item.route == ROUTE_TASK:
            return SubmitTask("route: task", skills)
        if item.route == ROUTE_ISOLATED:
            return RunIsolated("route: isolated", skills)
        if item.route == ROUTE_SUMMARY:
            return Summarize("route: summary")
        if item.event_type.startswith("goal."):
            return self._goal(item, config, skills)
        return Summarize(f"route: {item.route}, default" if item.route else "no route: default")

    @staticmethod
    def _goal(item: InboxItem, config: HeartbeatConfig, skills: tuple[str, ...]) -> Decision:
        action = goal_action(item)
        if action is not None and action in config.goal_isolated_actions:
            return RunIsolated(f"goal action {action!r} is in goal_isolated_actions", skills)
        if action is not None and action in config.goal_task_actions:
            return SubmitTask(f"goal action {action!r} is in goal_task_actions", skills)
        deviation = goal_deviation(item)
        threshold = config.goal_isolated_deviation_threshold
        if deviation is not None and deviation > threshold:
            return RunIsolated(f"goal deviation {deviation:g} exceeds {threshold:g}", skills)
        return Summarize("goal item: no configured action applies")
