"""A space's lifecycle, as pure functions of the space, the time and the settings:

- **state** from the last activity: active -> dormant (48 h) -> parked (7 d) -> archived (30 d);
  a pinned space stays active; every state can come back (a new fact, a resurrection);
- **pins**: a person's pin or unpin wins; otherwise a due date (until a day after it), an open
  commitment or a WAITING dependency pins it (the last two as the settings allow);
- **joining** a fact: its evidence, entities, anchors and hints;
- **resurrection**: an old space taken back for a fact, recorded with what it was before, so it can
  be reverted.

Nothing here deletes anything.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.evidence import evidence_score
from genworker.autonomy.spaces.models import (
    Change,
    ContextEvent,
    ContextSpace,
    EvidenceRef,
    FocusType,
    PinReason,
    Review,
    SpaceState,
)

__all__ = [
    "DEADLINE_GRACE", "evidence_of", "focus_of", "join", "new_space", "pin_of", "resurrect", "settle", "state_at",
]  # fmt: skip

DEADLINE_GRACE: Final = timedelta(days=1)  # a due date keeps its space pinned until a day after it
MAX_ENTITIES: Final = 300
_TITLE_CHARS: Final = 90


def state_at(space: ContextSpace, now: datetime, s: SpaceSettings) -> SpaceState:
    if space.is_pinned:
        return SpaceState.ACTIVE
    idle = now - space.last_active_at
    if idle < timedelta(hours=s.dormant_after_hours):
        return SpaceState.ACTIVE
    if idle < timedelta(days=s.parked_after_days):
        return SpaceState.DORMANT
    if idle < timedelta(days=s.archive_after_days):
        return SpaceState.PARKED
    return SpaceState.ARCHIVED


def pin_of(space: ContextSpace, now: datetime, s: SpaceSettings) -> tuple[bool, PinReason | None]:
    if space.manual_pin is not None:
        return (True, "manual") if space.manual_pin else (False, None)
    if space.due_at is not None and space.due_at + DEADLINE_GRACE >= now:
        return True, "deadline"
    if s.auto_pin_if_open_commitment and space.open_commitments_count > 0:
        return True, "open_commitment"
    if s.auto_pin_if_waiting_dependency and space.waiting_on:
        return True, "waiting_dependency"
    return False, None


def settle(space: ContextSpace, now: datetime, s: SpaceSettings) -> ContextSpace:
    """The space with its pin and state as they are at `now`."""
    pinned, reason = pin_of(space, now, s)
    pinned_space = space.model_copy(update={"is_pinned": pinned, "pin_reason": reason})
    state = state_at(pinned_space, now, s)
    if (pinned, reason, state) == (space.is_pinned, space.pin_reason, space.state):
        return space
    return pinned_space.model_copy(update={"state": state})


def focus_of(event: ContextEvent) -> tuple[FocusType, str]:
    goal = next((a for a in event.anchors if a.startswith("goal:")), None)
    if goal is not None:
        return "goal", goal.removeprefix("goal:")
    if event.hints.commitment == "open" or event.hints.due_at is not None:
        return "commitment", event.anchors[0] if event.anchors else ""
    return "project", event.anchors[0] if event.anchors else ""


def evidence_of(event: ContextEvent, route: str = "") -> EvidenceRef:
    return EvidenceRef(
        event_id=event.event_id,
        source=event.source,
        at=event.occurred_at,
        confidence=event.confidence,
        actionable=event.actionable,
        actor=event.actor,
        summary=event.summary,
        priority=event.hints.priority,
        risk=event.hints.risk,
        intent=event.hints.intent,
        starts_at=event.hints.starts_at,
        route=route,
    )


def new_space(
    space_id: str,
    event: ContextEvent,
    now: datetime,
    s: SpaceSettings,
    *,
    review: Review = "confirmed",
    confidence: float | None = None,
    reason: str = "",
    suggested: str | None = None,
) -> ContextSpace:
    focus_type, focus_ref = focus_of(event)
    title = event.summary if len(event.summary) <= _TITLE_CHARS else event.summary[: _TITLE_CHARS - 1] + "…"
    space = ContextSpace(
        space_id=space_id,
        tenant_id=event.tenant_id,
        worker_id=event.worker_id,
        title=title,
        focus_type=focus_type,
        focus_ref=focus_ref,
        created_at=now,
        last_active_at=now,
        review=review,
        route_confidence=confidence,
        route_reason=reason,
        suggested_space=suggested,
        changes=(Change(at=now, kind="created", detail=reason or "new space", event_id=event.event_id),),
    )
    return join(space, event, now, s, f"new: {reason}" if reason else "new")


def join(space: ContextSpace, event: ContextEvent, now: datetime, s: SpaceSettings, route: str = "") -> ContextSpace:
    """`space` with `event` added (once) and active again; `route` says why it came here."""
    if space.has_event(event.event_id):
        return space
    evidence = (*space.evidence, evidence_of(event, route))
    entities = tuple(dict.fromkeys((*space.entity_set, *event.entities)))[-MAX_ENTITIES:]
    hints = event.hints
    commitments = space.open_commitments_count + (hints.commitment == "open") - (hints.commitment == "done")
    waiting = None if hints.waiting_resolved else hints.waiting_on or space.waiting_on
    due = space.due_at
    if hints.due_at is not None and (due is None or hints.due_at < due or due + DEADLINE_GRACE < now):
        due = hints.due_at
    joined = space.model_copy(
        update={
            "evidence": evidence,
            "entity_set": entities,
            "anchors": tuple(dict.fromkeys((*space.anchors, *event.anchors))),
            "open_commitments_count": max(0, commitments),
            "waiting_on": waiting,
            "due_at": due,
            "last_active_at": max(space.last_active_at, now),
            "space_score": evidence_score(evidence),
        }
    )
    return settle(joined, now, s)


def resurrect(
    space: ContextSpace, event: ContextEvent, now: datetime, s: SpaceSettings, *, similarity: float | None, via: str
) -> ContextSpace:
    """An old space (dormant, parked or archived) taken back for `event`; recorded so it can be reverted."""
    how = f"{via}, similarity {similarity:.2f}" if similarity is not None else via
    change = Change(
        at=now,
        kind="resurrected",
        detail=f"{space.state.value} -> active for {event.event_id} ({how})",
        event_id=event.event_id,
        from_state=space.state,
        similarity=similarity,
        previous_active_at=space.last_active_at,
    )
    revived = space.model_copy(update={"changes": (*space.changes, change), "last_reactivated_at": now})
    return join(revived, event, now, s, f"resurrected ({how})")
