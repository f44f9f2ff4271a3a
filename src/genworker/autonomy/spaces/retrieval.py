"""The bounded workbench: which spaces a fact could belong to, before any model is asked.

`retrieve` takes at most `retrieval_candidates_max` (50) spaces from three lists: pinned spaces
(when `always_include_pinned`), full-text matches of the fact's words and entities among active and
dormant spaces, and the recently active ones (within `recency_window_hours`). Each list first gets
its share — a quarter for pinned, half for matches, the rest for recent — and what one leaves
unused goes to the others, matches first.

`rank` orders them by `similarity` plus small boosts (pinned, recently active, due soon) and
keeps `llm_candidates_max` (12): the model never sees more.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.index import IndexedSpace, SpaceIndex
from genworker.autonomy.spaces.models import ContextEvent, SpaceState
from genworker.autonomy.spaces.similarity import similarity, tokens

__all__ = ["OLD_STATES", "Ranked", "match_text", "rank", "retrieve"]

OLD_STATES: Final = (SpaceState.DORMANT, SpaceState.PARKED, SpaceState.ARCHIVED)
_CURRENT: Final = (SpaceState.ACTIVE, SpaceState.DORMANT)
_PINNED_BOOST: Final = 0.25
_RECENT_BOOST: Final = 0.15
_DUE_BOOST: Final = 0.15
_DUE_SOON: Final = timedelta(hours=72)

Ranked = tuple[IndexedSpace, float]


def match_text(event: ContextEvent) -> str:
    """What the full-text search looks for: the fact's words and its entities' values."""
    return " ".join([event.summary, *(e.partition(":")[2] for e in event.entities)])


def retrieve(index: SpaceIndex, event: ContextEvent, s: SpaceSettings, now: datetime) -> list[str]:
    limit = s.retrieval_candidates_max
    pinned = index.pinned(limit) if s.always_include_pinned else []
    matches = index.search(match_text(event), _CURRENT, limit)
    recent = index.recent(now - s.recency_window, limit)
    lists = [(pinned, limit // 4), (matches, limit // 2), (recent, limit)]
    chosen: dict[str, None] = {}
    for ids, share in lists:
        for space_id in ids[:share]:
            if len(chosen) >= limit:
                break
            chosen.setdefault(space_id)
    for ids in (matches, pinned, recent):  # shares left unused
        for space_id in ids:
            if len(chosen) >= limit:
                break
            chosen.setdefault(space_id)
    return list(chosen)


def rank(profiles: Sequence[IndexedSpace], event: ContextEvent, s: SpaceSettings, now: datetime) -> list[Ranked]:
    words = tokens(event.summary)
    window = s.recency_window.total_seconds() or 1.0
    scored = []
    for p in profiles:
        score = similarity(event.entities, words, p.entities, p.keywords)
        if p.pinned:
            score += _PINNED_BOOST
        idle = max((now - p.last_active).total_seconds(), 0.0)
        score += _RECENT_BOOST * max(0.0, 1.0 - idle / window)
        if p.due is not None and now - timedelta(days=1) <= p.due <= now + _DUE_SOON:
            score += _DUE_BOOST
        scored.append((p, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0].space_id))
    return scored[: s.shown_max]
