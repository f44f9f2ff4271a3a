"""Anti-fragmentation after creation (Steward: a new space highly similar to an existing one is
merged): a young space — created within `dormant_after_hours`, confirmed — whose facts turn out to be
covered by an older space at `resurrection_similarity_threshold` or more is merged into it, like a
person's re-filing (`review.refile`), recorded on both and undone by `review.unmerge`.

It catches what routing one fact at a time cannot: two runtimes that each opened a space for the same
incident at once, a NEW made while the older space was not among the twelve shown, a space that grew
into another's topic. Similarity is `similarity.similarity` of the young space's entities and most
frequent words against the older one's; a pair whose merge a person undid is never merged again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.index import SpaceIndex
from genworker.autonomy.spaces.models import ContextSpace, SpaceState
from genworker.autonomy.spaces.paths import SPACE_ID
from genworker.autonomy.spaces.review import merge_reverted
from genworker.autonomy.spaces.similarity import keywords, similarity

__all__ = ["duplicates_of"]

_WORDS: Final = 40
_SEARCH_WORDS: Final = 10  # the full-text query: top words and latest entities (BM25 cost grows with terms)


def _number(space_id: str) -> int:
    found = SPACE_ID.match(space_id)
    return int(found.group(1)) if found else 0


def duplicates_of(index: SpaceIndex, space: ContextSpace, s: SpaceSettings, now: datetime) -> list[tuple[str, float]]:
    """Older spaces `space` duplicates, the most similar first (empty when it is not a young,
    confirmed space, or merging is off). Looked at when its facts reach 1, 2, 4, 8 ...: a space's
    words change slowly as it grows, so the check costs a search per doubling, not per fact."""
    young = now - space.created_at <= timedelta(hours=s.dormant_after_hours)
    facts = len(space.evidence)
    grown = facts > 0 and facts & (facts - 1) == 0  # 1, 2, 4, 8 ... facts: its profile has changed enough
    if not (s.merge_duplicates and young and grown and space.review == "confirmed"):
        return []
    words = keywords([space.title, *(e.summary for e in space.evidence)], _WORDS)
    text = " ".join([*words[:_SEARCH_WORDS], *(e.partition(":")[2] for e in space.entity_set[-_SEARCH_WORDS:])])
    found = index.search(text, tuple(SpaceState), s.retrieval_candidates_max)
    older = [i for i in found if _number(i) < _number(space.space_id) and not merge_reverted(space, i)]
    scored = [(p.space_id, similarity(space.entity_set, words, p.entities, p.keywords)) for p in index.profiles(older)]
    above = [(i, round(score, 4)) for i, score in scored if score >= s.resurrection_similarity_threshold]
    return sorted(above, key=lambda pair: (-pair[1], _number(pair[0])))
