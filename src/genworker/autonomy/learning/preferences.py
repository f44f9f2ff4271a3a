"""Steward's two personal adaptations, learned from feedback like the gate's (each a versioned change
that runs in shadow first and is applied by a person):

- **priority personalisation**: `edit_priority` feedback (a person moved an item from `old_value` to
  `new_value`, P0-P3) on items alike — the same `similarity_key`, Steward's
  `[source, intent, entity_type, counterpart_role]` — adds up, each edit weighted
  `manual_priority_boost_weight` per level and halved every `decay_half_life_days` of age; a whole
  level reached moves future items alike up (or down) that many levels, at most
  `max_auto_boost_level`;
- **interruption budget auto-tune**: interruptions a person snoozed against those they acted on
  (answered a confirmation it asked for, raised an item's priority): more snoozed than acted on
  lowers the budget a step, acted on at least `target_utilization` of the time raises it a step,
  always within `floor` / `ceiling`, at most one change a day (`step_per_day`).

Both need `min_samples_for_adaptation` events since the subject's last change. Pure functions: the
learner stores what they return.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

from genworker.autonomy.learning.models import (
    BUDGET,
    ChangeKind,
    FeedbackEvent,
    LearningState,
    PolicyChange,
)
from genworker.workspace.models.steward import LearningConfig

__all__ = ["LEVELS", "Proposed", "budget_change", "counted_since", "level", "priority_changes", "shifted"]

LEVELS: Final = ("P0", "P1", "P2", "P3")
Proposed = tuple[PolicyChange, list[FeedbackEvent]]  # a change and the feedback it was learned from


def level(value: str | None) -> int | None:
    """0 for P0 ... 3 for P3; None for anything else."""
    text = (value or "").strip().upper()
    return LEVELS.index(text) if text in LEVELS else None


def shifted(priority: str, levels: int) -> str:
    """`priority` moved `levels` up (+) or down (-). Never into P0 (a learned rule never lets an item
    past the budget and quiet hours) and never below P3; a P0 stays P0."""
    at = level(priority)
    if at is None or at == 0 or levels == 0:
        return priority
    return LEVELS[min(3, max(1, at - levels))]


def counted_since(cfg: LearningConfig, state: LearningState, subject: str, kind: ChangeKind, now: datetime) -> datetime:
    """Feedback about `subject` counts from the later of `decay_half_life_days` ago and its last
    policy change (created, applied or ended)."""
    since = now - timedelta(days=cfg.decay_half_life_days)
    for version in state.versions:
        if version.touches(subject, kind):
            since = max(since, version.ended_at or version.applied_at or version.created_at)
    return since


def _weight(cfg: LearningConfig, event: FeedbackEvent, now: datetime) -> float:
    age_days = (now - event.created_at).total_seconds() / 86_400
    return float(0.5 ** (age_days / cfg.decay_half_life_days))


def _moved(event: FeedbackEvent) -> int:
    """Levels a person moved the item up (+) or down (-); 0 when the values are not priorities."""
    old, new = level(event.old_value), level(event.new_value)
    return 0 if old is None or new is None else old - new


def priority_changes(
    cfg: LearningConfig, state: LearningState, events: list[FeedbackEvent], now: datetime
) -> list[Proposed]:
    pp = cfg.feedback_loop.priority_personalization
    if not pp.enabled:
        return []
    alike: dict[str, list[FeedbackEvent]] = {}
    for event in events:
        if event.feedback_type == "edit_priority" and event.features and _moved(event):
            alike.setdefault(event.similarity_key(pp.similarity_key), []).append(event)
    current, found = state.priorities(), []
    for key, edits in sorted(alike.items()):
        if any(v.touches(key, "priority") for v in state.shadows):
            continue  # one change at a time per key
        since = counted_since(cfg, state, key, "priority", now)
        counted = [e for e in edits if e.created_at > since]
        if len(counted) < cfg.min_samples_for_adaptation:
            continue
        score = sum(pp.manual_priority_boost_weight * _moved(e) * _weight(cfg, e, now) for e in counted)
        was = current.get(key, 0)
        target = max(-pp.max_auto_boost_level, min(pp.max_auto_boost_level, was + int(score)))
        if target != was:
            why = f"{len(counted)} priority edits of items alike add up to {score:+.2f} level(s)"
            found.append((PolicyChange(key, None, why, "priority", target), counted))
    return found


def _engaged(event: FeedbackEvent) -> bool:
    """A person acted on an interruption: answered a confirmation it asked for, or raised a priority."""
    answered = event.feedback_type in ("approve", "reject") and event.gate_result == "confirm"
    return answered or (event.feedback_type == "edit_priority" and _moved(event) > 0)


def budget_change(
    cfg: LearningConfig,
    state: LearningState,
    events: list[FeedbackEvent],
    now: datetime,
    base: Callable[[], int],
) -> Proposed | None:
    """`base`: the policy's `interruption_budget_per_day`, the budget while nothing learned is applied."""
    tune = cfg.feedback_loop.interruption_budget_auto_tune
    if not tune.enabled or any(v.kind == "budget" for v in state.shadows):
        return None
    if any(v.kind == "budget" and now - v.created_at < timedelta(days=1) for v in state.versions):
        return None  # at most one step a day
    since = counted_since(cfg, state, BUDGET, "budget", now)
    counted = [e for e in events if e.created_at > since]
    snoozed = [e for e in counted if e.feedback_type == "snooze"]
    engaged = [e for e in counted if _engaged(e)]
    if len(snoozed) + len(engaged) < cfg.min_samples_for_adaptation:
        return None
    learned = state.budget()
    current = base() if learned is None else learned
    share = len(engaged) / (len(snoozed) + len(engaged))
    if len(snoozed) > len(engaged):
        target, evidence = max(tune.floor, current - tune.step_per_day), snoozed
        why = f"{len(snoozed)} interruptions snoozed, {len(engaged)} acted on: {current} -> {target} a day"
        if target >= current:
            return None
    elif share >= tune.target_utilization:
        target, evidence = min(tune.ceiling, current + tune.step_per_day), engaged
        why = f"{len(engaged)} of {len(engaged) + len(snoozed)} interruptions acted on: {current} -> {target} a day"
        if target <= current:
            return None
    else:
        return None
    return PolicyChange(BUDGET, None, why, "budget", target), evidence
