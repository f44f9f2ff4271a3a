"""What a person does with spaces (API, CLI, brief options): confirm a pending NEW, re-file a space
into another, pin or unpin one, revert a resurrection, undo a re-filing or an automatic merge
(`unmerge`). The router merges a young duplicate space the same way as a re-filing (`refile` with
its similarity). Every change is recorded on the spaces involved and nothing is deleted: a re-filed
or merged space stays on disk as `merged` into its target, with its facts, and can come back.

Blocking functions; the caller holds the worker's spaces lock and puts the returned spaces in the
index.
"""

from __future__ import annotations

from datetime import datetime

from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.errors import SpaceTransitionError
from genworker.autonomy.spaces.evidence import evidence_score
from genworker.autonomy.spaces.lifecycle import new_space, settle
from genworker.autonomy.spaces.models import Change, ContextSpace
from genworker.autonomy.spaces.store import EventLog

__all__ = ["confirm", "merge_reverted", "pin", "refile", "revert_resurrection", "unmerge"]


def _live(space: ContextSpace) -> ContextSpace:
    if space.review == "merged":
        raise SpaceTransitionError(f"{space.space_id} was re-filed into {space.merged_into}; change that one")
    return space


def confirm(space: ContextSpace, now: datetime) -> ContextSpace:
    if _live(space).review != "pending":
        raise SpaceTransitionError(f"{space.space_id} is not waiting for a confirmation")
    change = Change(at=now, kind="confirmed", detail="confirmed as a space of its own")
    return space.model_copy(update={"review": "confirmed", "changes": (*space.changes, change)})


def refile(
    source: ContextSpace, target: ContextSpace, now: datetime, s: SpaceSettings, *, similarity: float | None = None
) -> tuple[ContextSpace, ...]:
    """`source`'s facts, entities, anchors and task candidates go to `target`; `source` is kept as
    merged. With a `similarity`, the router's automatic merge of a duplicate. Returns (source,
    target) as stored."""
    if source.space_id == target.space_id:
        raise SpaceTransitionError(f"{source.space_id} cannot be re-filed into itself")
    _live(source), _live(target)
    if similarity is None:
        here, there = f"{source.space_id} re-filed here", f"re-filed into {target.space_id}"
    else:
        here = f"{source.space_id} merged here automatically (duplicate, similarity {similarity:.2f})"
        there = f"merged into {target.space_id} automatically (duplicate, similarity {similarity:.2f})"
    held = set(target.evidence_events)
    evidence = (*target.evidence, *(e for e in source.evidence if e.event_id not in held))
    due = min((d for d in (source.due_at, target.due_at) if d is not None), default=None)
    moved = target.model_copy(
        update={
            "evidence": tuple(sorted(evidence, key=lambda e: e.at)),
            "entity_set": tuple(dict.fromkeys((*target.entity_set, *source.entity_set))),
            "anchors": tuple(dict.fromkeys((*target.anchors, *source.anchors))),
            "candidates": (*target.candidates, *source.candidates),
            "open_commitments_count": target.open_commitments_count + source.open_commitments_count,
            "waiting_on": target.waiting_on or source.waiting_on,
            "due_at": due,
            "last_active_at": max(target.last_active_at, source.last_active_at),
            "space_score": evidence_score(evidence),
            "changes": (*target.changes, Change(at=now, kind="absorbed", detail=here, other_space=source.space_id)),
        }
    )
    gone = Change(
        at=now, kind="refiled" if similarity is None else "merged", detail=there, other_space=target.space_id,
        similarity=similarity,
    )  # fmt: skip
    merged = source.model_copy(
        update={"review": "merged", "merged_into": target.space_id, "changes": (*source.changes, gone)}
    )
    return merged, settle(moved, now, s)


def merge_reverted(a: ContextSpace, b: str) -> bool:
    """Whether a merge or re-filing between `a` and space `b` was undone (it is not made again)."""
    return any(c.kind == "merge_reverted" and c.other_space == b for c in a.changes)


def unmerge(
    source: ContextSpace, target: ContextSpace, log: EventLog, now: datetime, s: SpaceSettings
) -> tuple[ContextSpace, ContextSpace]:
    """Undo the re-filing or automatic merge of `source` into `target`: its facts and task candidates
    leave the target, whose entities and anchors are those of the facts it keeps; `source` is a
    confirmed space again, active now. Returns (source, target) as stored."""
    if source.review != "merged" or source.merged_into != target.space_id:
        raise SpaceTransitionError(f"{source.space_id} is not merged into {target.space_id}")
    _live(target)
    moved = set(source.evidence_events)
    kept = tuple(e for e in target.evidence if e.event_id not in moved)
    events = log.read(target.tenant_id, target.worker_id, [e.event_id for e in kept])
    detail = f"{source.space_id} taken back out of {target.space_id}"
    restored = target.model_copy(
        update={
            "evidence": kept,
            "entity_set": tuple(dict.fromkeys(e for ev in events for e in ev.entities)) or target.entity_set,
            "anchors": tuple(dict.fromkeys(a for ev in events for a in ev.anchors)),
            "candidates": tuple(c for c in target.candidates if c.derived_from != source.space_id),
            "open_commitments_count": max(0, target.open_commitments_count - source.open_commitments_count),
            "space_score": evidence_score(kept),
            "changes": (
                *target.changes,
                Change(at=now, kind="merge_reverted", detail=detail, other_space=source.space_id),
            ),
        }
    )
    back = source.model_copy(
        update={
            "review": "confirmed",
            "merged_into": None,
            "last_active_at": max(source.last_active_at, now),
            "changes": (
                *source.changes,
                Change(at=now, kind="merge_reverted", detail=detail, other_space=target.space_id),
            ),
        }
    )
    return settle(back, now, s), settle(restored, now, s)


def pin(space: ContextSpace, on: bool | None, now: datetime, s: SpaceSettings) -> ContextSpace:
    """A person's pin (True) or unpin (False); None hands it back to the automatic pins."""
    kind = "unpinned" if on is False else "pinned"
    detail = {True: "pinned by a person", False: "unpinned by a person", None: "pins automatic again"}[on]
    change = Change(at=now, kind=kind, detail=detail)
    changed = _live(space).model_copy(update={"manual_pin": on, "changes": (*space.changes, change)})
    return settle(changed, now, s)


def revert_resurrection(
    space: ContextSpace,
    event_id: str,
    new_id: str,
    log: EventLog,
    now: datetime,
    s: SpaceSettings,
) -> tuple[ContextSpace, ContextSpace]:
    """Undo the resurrection `event_id` caused: the fact gets a new space `new_id` of its own, and
    the space goes back to how old it was — unless other facts joined it since, which keep it as
    active as they made it. Returns (the old space, the new one)."""
    _live(space)
    done = {c.event_id for c in space.changes if c.kind == "resurrection_reverted"}
    change = next((c for c in space.changes if c.kind == "resurrected" and c.event_id == event_id), None)
    if change is None or event_id in done:
        raise SpaceTransitionError(f"{space.space_id} has no resurrection by {event_id} to revert")
    found = log.read(space.tenant_id, space.worker_id, [e.event_id for e in space.evidence])
    by_id = {e.event_id: e for e in found}
    event = by_id.get(event_id)
    if event is None:
        raise SpaceTransitionError(f"event {event_id} is not in the event log")
    kept = tuple(e for e in space.evidence if e.event_id != event_id)
    joined_since = space.evidence_events.index(event_id) < len(space.evidence) - 1
    others = [by_id[e.event_id] for e in kept if e.event_id in by_id]
    undone = Change(
        at=now, kind="resurrection_reverted", detail=f"{event_id} moved to {new_id}", event_id=event_id,
        other_space=new_id,
    )  # fmt: skip
    restored = space.model_copy(
        update={
            "evidence": kept,
            "entity_set": tuple(dict.fromkeys(e for ev in others for e in ev.entities)) or space.entity_set,
            "anchors": tuple(dict.fromkeys(a for ev in others for a in ev.anchors)),
            "last_active_at": space.last_active_at
            if joined_since
            else change.previous_active_at or space.last_active_at,
            "space_score": evidence_score(kept),
            "changes": (*space.changes, undone),
        }
    )
    reason = f"resurrection of {space.space_id} reverted"
    return settle(restored, now, s), new_space(new_id, event, now, s, reason=reason)
