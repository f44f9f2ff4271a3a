"""SkillMatcher: which of a worker's skills runs a task, and why.

Order: the caller's explicit `skill_id` (unknown -> UnknownSkillError); the duty's skill
(`skill_id`, else `skill_hint`); keyword scoring of the task text, where preferred skills get a
boost and win ties; the persona's `default_skill`; a skill marked
`metadata.genworker.default_skill`; otherwise no skill. Ties are broken by preference, then
`metadata.genworker.priority` (higher first), then the order of `preferred_skill_ids`, then name.

A keyword matches case-insensitively as a whole word: "api" matches "call the API" and
"调用api接口" but not "rapid"; keywords in scripts written without spaces (Chinese, Japanese)
match anywhere in the text. A skill's score is the sum of the weights of its keywords found.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Literal

from genworker.workspace.models import SkillLevel
from genworker.workspace.snapshot import Skill, Worker

__all__ = ["PREFERRED_BOOST", "MatchReason", "SkillMatch", "SkillMatcher", "UnknownSkillError", "keyword_score"]

log = logging.getLogger("genworker.worker")

MatchReason = Literal["explicit", "duty_hint", "preferred", "keywords", "default_skill", "fallback", "none"]
PREFERRED_BOOST = 1.0  # added to a preferred skill's keyword score: about one ordinary keyword
_LEVEL_ORDER = {SkillLevel.WORKER: 0, SkillLevel.TENANT: 1, SkillLevel.SYSTEM: 2}
# Letters of scripts written with spaces between words; a keyword edge in one of them needs a word boundary.
_SPACED = "0-9A-Za-z_\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff"
_SPACED_CHAR = re.compile(f"[{_SPACED}]")
_EMPTY: Mapping[str, float] = MappingProxyType({})


class UnknownSkillError(LookupError):
    """The caller named a skill the worker does not have (a client error: answer 4xx)."""

    def __init__(self, skill_id: str, worker_id: str, available: Iterable[str]) -> None:
        names = sorted(available)
        super().__init__(
            f"skill {skill_id!r} is not a skill of worker {worker_id}; available: {', '.join(names) or '(none)'}"
        )
        self.skill_id = skill_id
        self.worker_id = worker_id
        self.available = tuple(names)


@dataclass(frozen=True, slots=True)
class SkillMatch:
    skill: Skill | None
    reason: MatchReason
    scores: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # per skill with a score > 0, when scored

    @property
    def skill_id(self) -> str | None:
        return self.skill.name if self.skill is not None else None


@lru_cache(maxsize=4096)
def _keyword_pattern(keyword: str) -> re.Pattern[str] | None:
    words = keyword.casefold().split()
    if not words:
        return None
    body = r"\s+".join(re.escape(w) for w in words)
    start = f"(?<![{_SPACED}])" if _SPACED_CHAR.match(words[0][0]) else ""
    end = f"(?![{_SPACED}])" if _SPACED_CHAR.match(words[-1][-1]) else ""
    return re.compile(start + body + end)


def keyword_score(skill: Skill, folded_text: str) -> float:
    """Sum of the weights of the skill's keywords found in `folded_text` (already casefolded).
    A keyword weighted 0 or less (upstream files may have one) never scores."""
    total = 0.0
    for kw in skill.spec.settings.keywords:
        if kw.weight <= 0:
            continue
        pattern = _keyword_pattern(kw.keyword)
        if pattern is not None and pattern.search(folded_text):
            total += kw.weight
    return total


class SkillMatcher:
    def __init__(self, *, preferred_boost: float = PREFERRED_BOOST) -> None:
        self._boost = preferred_boost

    def match(
        self,
        worker: Worker,
        text: str,
        *,
        skill_id: str | None = None,
        duty_skill_hint: str | None = None,
        preferred_skill_ids: Sequence[str] = (),
    ) -> SkillMatch:
        skills = worker.skills
        if skill_id is not None:
            if skill_id not in skills:
                raise UnknownSkillError(skill_id, worker.worker_id, skills)
            return SkillMatch(skills[skill_id], "explicit")
        if duty_skill_hint is not None:
            if duty_skill_hint in skills:
                return SkillMatch(skills[duty_skill_hint], "duty_hint")
            log.warning("duty skill %r is not a skill of %s/%s", duty_skill_hint, worker.tenant_id, worker.worker_id)
        preferred = [s for s in dict.fromkeys(preferred_skill_ids) if s in skills]
        scored = self._scored(skills, text, preferred)
        if scored:
            scores = MappingProxyType({name: score for name, (score, _) in scored.items()})
            best = min(scored, key=lambda name: self._rank(skills[name], scored[name][0], preferred))
            return SkillMatch(skills[best], "keywords" if scored[best][1] > 0 else "preferred", scores)
        default = worker.persona.default_skill
        if default is not None and default in skills:
            return SkillMatch(skills[default], "default_skill")
        marked = [s for s in skills.values() if s.spec.settings.default_skill]
        if marked:
            chosen = min(marked, key=lambda s: (-s.spec.settings.priority, _LEVEL_ORDER[s.level], s.name))
            return SkillMatch(chosen, "fallback")
        return SkillMatch(None, "none")

    def _scored(self, skills: Mapping[str, Skill], text: str, preferred: list[str]) -> dict[str, tuple[float, float]]:
        """name -> (score with boost, keyword score), for skills whose score is above zero."""
        folded = text.casefold()
        result: dict[str, tuple[float, float]] = {}
        for name in sorted(skills):
            keywords = keyword_score(skills[name], folded)
            total = keywords + (self._boost if name in preferred else 0.0)
            if total > 0:
                result[name] = (total, keywords)
        return result

    @staticmethod
    def _rank(skill: Skill, score: float, preferred: list[str]) -> tuple[float, bool, int, int, str]:
        is_preferred = skill.name in preferred
        order = preferred.index(skill.name) if is_preferred else len(preferred)
        return (-score, not is_preferred, -skill.spec.settings.priority, order, skill.name)
