"""The bounded workbench: which spaces a fact could belong to, before any model is asked.

`retrieve` takes at most `retrieval_candidates_max` (50) spaces from three lists: pinned spaces
(when `always_include_pinned`), full-text matches of the fact's words and entities among active and
dormant spaces, and the recently active ones (within `recency_window_hours`). Each list first gets
its share — a quarter for pinned, half for matches, the rest for recent — and what one leaves
unused goes to the others, matches first.

`rank` orders them by `similarity` (with embeddings, the larger of it and the cosine of the fact's
and the space's vectors: a paraphrase sharing no word still ranks) plus small boosts (pinned,
recently active, due soon, and the time window) and keeps `llm_candidates_max` (12): the model never sees more.

The **time window** (`time_window_minutes`, 90) is the seed's cross-source alignment: facts close in
time about the same things belong together. A space one of whose facts happened within the window
of this fact — or whose meeting starts within it (a calendar fact's start) — gains up to
`_WINDOW_BOOST`, scaled by how close the nearest is and by how much of the fact it already covers
(its entities or its words). It looks at when the facts happened, not when they arrived: a
late-arriving email about this morning's outage goes with this morning's space, not with whatever
was active last.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.index import IndexedSpace, SpaceIndex, cosine
from genworker.autonomy.spaces.models import ContextEvent, SpaceState
from genworker.autonomy.spaces.similarity import blend, entity_cover, tokens, word_cover

__all__ = ["OLD_STATES", "Ranked", "match_text", "rank", "retrieve", "similar", "window_boost"]

OLD_STATES: Final = (SpaceState.DORMANT, SpaceState.PARKED, SpaceState.ARCHIVED)
_CURRENT: Final = (SpaceState.ACTIVE, SpaceState.DORMANT)
_PINNED_BOOST: Final = 0.25
_RECENT_BOOST: Final = 0.15
_DUE_BOOST: Final = 0.15
_DUE_SOON: Final = timedelta(hours=72)
_WINDOW_BOOST: Final = 0.3

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


def similar(p: IndexedSpace, event: ContextEvent, words: Sequence[str], query: Sequence[float] | None) -> float:
    """How much the fact is about the space: words and entities, or its meaning when both have vectors."""
    return _similar(p, event, words, query)[0]


def _similar(
    p: IndexedSpace, event: ContextEvent, words: Sequence[str], query: Sequence[float] | None
) -> tuple[float, float]:
    """(`similar`, how much of the fact the space covers: the larger of its entity and word covers)."""
    entities, found = entity_cover(event.entities, p.entities), word_cover(words, p.keywords)
    score = blend(event.entities, entities, found)
    if query is not None and p.vector is not None:
        score = max(score, cosine(query, p.vector))
    return score, max(entities, found)


def rank(
    profiles: Sequence[IndexedSpace],
    event: ContextEvent,
    s: SpaceSettings,
    now: datetime,
    query: Sequence[float] | None = None,
) -> list[Ranked]:
    """`query`: the fact's vector, with embeddings."""
    words = tokens(event.summary)
    window = s.recency_window.total_seconds() or 1.0
    scored = []
    for p in profiles:
        score, cover = _similar(p, event, words, query)
        if p.pinned:
            score += _PINNED_BOOST
        idle = max((now - p.last_active).total_seconds(), 0.0)
        score += _RECENT_BOOST * max(0.0, 1.0 - idle / window)
        if p.due is not None and now - timedelta(days=1) <= p.due <= now + _DUE_SOON:
            score += _DUE_BOOST
        score += window_boost(p, event, s, cover)
        scored.append((p, score))
    scored.sort(key=lambda pair: (-pair[1], pair[0].space_id))
    return scored[: s.shown_max]


def window_boost(p: IndexedSpace, event: ContextEvent, s: SpaceSettings, cover: float) -> float:
    """Up to `_WINDOW_BOOST`: the space's nearest fact (or meeting start) within the time window of
    this fact, times how much of the fact the space covers (`cover`, 0..1)."""
    window = s.time_window.total_seconds()
    if window <= 0 or not p.times:
        return 0.0
    at = [event.occurred_at.timestamp()]
    if event.hints.starts_at is not None:
        at.append(event.hints.starts_at.timestamp())
    nearest = min(_nearest(p.times, a) for a in at)
    if nearest >= window:
        return 0.0
    return _WINDOW_BOOST * (1.0 - nearest / window) * cover


def _nearest(times: Sequence[float], at: float) -> float:
    """The distance from `at` to the nearest of `times` (ascending)."""
    i = bisect.bisect_left(times, at)
    return min(abs(times[j] - at) for j in (i - 1, i) if 0 <= j < len(times))
