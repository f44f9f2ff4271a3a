"""ContextSpaceRouter: which space a fact goes to (seed "bounded workbench"). It decides; the
service applies the decision.

::

    strong anchor (repo+issue, thread, goal, calendar topic) held by a space ─▶ that space
                                     (an old one is resurrected: via "anchor")
    retrieve ≤ 50 ─▶ rank ≤ 12 ─▶ the model: SPACE_<id> | NEW, confidence, reason
        a shown space, confidence ≥ min_confidence  ─▶ that space (an old one: resurrected, via "model")
        a shown space, below min_confidence        ─▶ NEW, pending a person (the space suggested)
        NEW (or nothing to show, or no usable answer) ─▶ resurrection check, then NEW
    resurrection check: dormant/parked/archived spaces matching the fact, similarity ≥
        resurrection_similarity_threshold ─▶ the most similar comes back (via "similarity")
    NEW: confirmed when the model was sure (or had nothing to choose from), else pending a person
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from genworker.autonomy.spaces.chooser import Choice
from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.index import IndexedSpace, SpaceIndex
from genworker.autonomy.spaces.models import ContextEvent, SpaceState
from genworker.autonomy.spaces.retrieval import OLD_STATES, match_text, rank, retrieve, similar
from genworker.autonomy.spaces.similarity import tokens

__all__ = ["Anchored", "Chooser", "Chosen", "ContextSpaceRouter", "CreateNew", "Resurrect", "Routing"]


@dataclass(frozen=True, slots=True)
class Anchored:
    space_id: str
    anchor: str


@dataclass(frozen=True, slots=True)
class Chosen:
    space_id: str
    confidence: float
    reason: str
    shown: int


@dataclass(frozen=True, slots=True)
class Resurrect:
    space_id: str
    via: Literal["anchor", "model", "similarity"]
    similarity: float | None
    reason: str
    shown: int = 0


@dataclass(frozen=True, slots=True)
class CreateNew:
    pending: bool  # a person has to confirm or re-file it
    confidence: float
    reason: str
    suggested: str | None = None
    shown: int = 0
    usable: bool = True  # False: the model gave no usable answer


Routing = Anchored | Chosen | Resurrect | CreateNew


class Chooser(Protocol):
    """What answers the multiple-choice question: `SpaceChooser` (the model), or a stand-in."""

    async def choose(self, event: ContextEvent, shown: Sequence[IndexedSpace], now: datetime) -> Choice: ...


class ContextSpaceRouter:
    def __init__(self, chooser: Chooser) -> None:
        self.chooser = chooser

    async def route(self, index: SpaceIndex, event: ContextEvent, s: SpaceSettings, now: datetime) -> Routing:
        """The index is read in a worker thread; the model call is the only other await."""
        plan = await asyncio.to_thread(self.workbench, index, event, s, now)
        if not isinstance(plan, list):
            return plan
        choice = await self.chooser.choose(event, plan, now)
        state = {p.space_id: p.state for p in plan}
        return await asyncio.to_thread(self._decide, index, event, s, choice, state, len(plan))

    def workbench(
        self, index: SpaceIndex, event: ContextEvent, s: SpaceSettings, now: datetime
    ) -> Routing | list[IndexedSpace]:
        """Blocking: a decision without the model (an anchor, nothing to choose from), or the ranked
        spaces to show it."""
        anchored = self._anchor(index, event)
        if anchored is not None:
            return anchored
        query = index.query_vector(event.summary)
        ranked = rank(index.profiles(retrieve(index, event, s, now)), event, s, now, query)
        if not ranked:
            return self._before_new(index, event, s, CreateNew(False, 1.0, "no candidate space"), query)
        return [p for p, _ in ranked]

    def _anchor(self, index: SpaceIndex, event: ContextEvent) -> Routing | None:
        for anchor in event.anchors:
            found = index.by_anchors([anchor])
            if not found:
                continue
            profile = index.profiles(found[:1])[0]
            if profile.state is SpaceState.ACTIVE:
                return Anchored(profile.space_id, anchor)
            return Resurrect(profile.space_id, "anchor", None, f"anchor {anchor}")
        return None

    def _decide(
        self,
        index: SpaceIndex,
        event: ContextEvent,
        s: SpaceSettings,
        choice: Choice,
        state: dict[str, SpaceState],
        shown: int,
    ) -> Routing:
        if not choice.usable:
            new = CreateNew(True, 0.0, choice.reason, shown=shown, usable=False)
            return self._before_new(index, event, s, new)
        if choice.space_id is not None:
            if choice.confidence < s.min_confidence:
                why = f"the model leaned to {choice.space_id} at {choice.confidence:.2f}: {choice.reason}"
                new = CreateNew(True, choice.confidence, why, choice.space_id, shown)
                return self._before_new(index, event, s, new)
            if state[choice.space_id] is not SpaceState.ACTIVE:
                return Resurrect(choice.space_id, "model", None, choice.reason, shown)
            return Chosen(choice.space_id, choice.confidence, choice.reason, shown)
        pending = choice.confidence < s.min_confidence
        return self._before_new(index, event, s, CreateNew(pending, choice.confidence, choice.reason, shown=shown))

    @staticmethod
    def _before_new(
        index: SpaceIndex, event: ContextEvent, s: SpaceSettings, new: CreateNew, query: Sequence[float] | None = None
    ) -> Routing:
        """Resurrection before NEW: the most similar old space, when similar enough."""
        if not s.resurrects:
            return new
        old = index.profiles(index.search(match_text(event), OLD_STATES, s.retrieval_candidates_max))
        words = tokens(event.summary)
        if query is None:
            query = index.query_vector(event.summary)
        best = max(((similar(p, event, words, query), p.space_id) for p in old), default=None)
        if best is None or best[0] < s.resurrection_similarity_threshold:
            return new
        score, space_id = best
        reason = f"similar to {space_id} ({score:.2f} >= {s.resurrection_similarity_threshold:.2f}); {new.reason}"
        return Resurrect(space_id, "similarity", round(score, 4), reason, new.shown)
