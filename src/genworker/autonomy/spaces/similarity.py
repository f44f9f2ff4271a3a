"""How much a fact is about a space, 0..1, without a model: the share of the fact's entities the
space already holds (weighted by kind: anchors weigh most, people least) and the share of the
fact's words found among the space's keywords. Used to rank candidates for the model and to decide
a resurrection (`resurrection_similarity_threshold`).

It is containment, not symmetric overlap: a space gathers many facts, so what matters is whether it
covers this one.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

__all__ = ["ENTITY_WEIGHTS", "blend", "entity_cover", "keywords", "similarity", "tokens", "word_cover"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
_STOP: Final = frozenset(
    """the and for are but not you your with this that from have has had was were will would could should
    can our out its into about there their they them then than what when where which who why how all any
    each few more most other some such only own same too very just now also been being here does did doing
    done get got per via let new yet still any please thanks thank hello team update updates today
    tomorrow yesterday""".split()  # noqa: SIM905
)
ENTITY_WEIGHTS: Final = {"issue": 3.0, "thread": 3.0, "goal": 3.0, "calendar": 3.0, "person": 0.5}
_DEFAULT_WEIGHT: Final = 1.5
_KEYWORDS: Final = 80
_EVENT_WORDS: Final = 40


def tokens(text: str) -> list[str]:
    """Lower-case words of three or more letters (digits count), CJK characters one by one, no stop words."""
    found: list[str] = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            found.extend(c for c in word if _CJK.match(c))
        elif len(word) >= 3 and word not in _STOP:
            found.append(word)
    return found


def keywords(texts: Iterable[str], limit: int = _KEYWORDS) -> tuple[str, ...]:
    """A space's word profile: its most frequent words, most frequent first."""
    counts = Counter(t for text in texts for t in set(tokens(text)))
    return tuple(word for word, _ in counts.most_common(limit))


def _weight(entity: str) -> float:
    return ENTITY_WEIGHTS.get(entity.partition(":")[0], _DEFAULT_WEIGHT)


def entity_cover(fact: Sequence[str], space: Iterable[str]) -> float:
    if not fact:
        return 0.0
    held = set(space)
    total = sum(_weight(e) for e in fact)
    return sum(_weight(e) for e in fact if e in held) / total


def word_cover(fact_words: Sequence[str], space_words: Iterable[str]) -> float:
    distinct = list(dict.fromkeys(fact_words))[:_EVENT_WORDS]
    if not distinct:
        return 0.0
    held = set(space_words)
    return sum(1 for w in distinct if w in held) / len(distinct)


def similarity(
    fact_entities: Sequence[str], fact_words: Sequence[str], space_entities: Iterable[str], space_words: Iterable[str]
) -> float:
    """The entities' share grows with their weight up to 0.6: a fact naming only a person (who works
    on many things) is judged mostly by its words, one naming an issue mostly by the issue."""
    return blend(fact_entities, entity_cover(fact_entities, space_entities), word_cover(fact_words, space_words))


def blend(fact_entities: Sequence[str], entities: float, words: float) -> float:
    """`similarity` from its two covers (for a caller that needs them apart too)."""
    share = min(0.6, 0.2 * sum(_weight(e) for e in fact_entities))
    if share == 0.0:
        return words
    return share * entities + (1 - share) * words
