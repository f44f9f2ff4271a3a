"""What a duty contract says about the actions a task asks for.

`decision_scope` entries are `"<verdict>: <what>"`; the verdict words are
auto/allow · suggest/propose/draft · confirm/must_confirm/approve/irreversible ·
blocked/block/forbidden/never. `approval` may say `required: true`, or list the actions that
need approval in `required_for`. Requested actions (plain verbs or phrases such as "send" or
"post the report") are matched word by word, case-insensitively: an action and an entry match
when the words of one appear, adjacent and in order, in the other. An `auto` entry covers an
action only in the strict direction (the entry's text contains the action), because it
authorises rather than restricts. Free task text is never parsed for policy: "never send
anything" must not read as a request to send.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from genworker.workspace.models import DutyContract

__all__ = ["ContractTerms", "ScopeEntry", "ScopeVerdict", "parse_scope_entry"]

ScopeVerdict = Literal["auto", "suggest", "confirm", "blocked"]

_VERDICT_WORDS: Mapping[str, ScopeVerdict] = {
    "auto": "auto",
    "allow": "auto",
    "suggest": "suggest",
    "propose": "suggest",
    "draft": "suggest",
    "confirm": "confirm",
    "must_confirm": "confirm",
    "approve": "confirm",
    "irreversible": "confirm",
    "blocked": "blocked",
    "block": "blocked",
    "forbidden": "blocked",
    "never": "blocked",
}
_WORD = re.compile(r"#?\w+")
_TRUE_WORDS = frozenset({"true", "yes", "always"})


@dataclass(frozen=True, slots=True)
class ScopeEntry:
    verdict: ScopeVerdict
    subject: str
    text: str  # the entry as written

    @property
    def words(self) -> tuple[str, ...]:
        return _words(self.subject)


def parse_scope_entry(text: str) -> ScopeEntry | None:
    """`"confirm: send any reply"` -> ScopeEntry("confirm", "send any reply"); no known verdict -> None."""
    head, sep, subject = text.partition(":")
    if not sep:
        return None
    verdict = _VERDICT_WORDS.get(re.sub(r"[\s-]+", "_", head.strip().casefold()))
    return ScopeEntry(verdict, subject.strip(), text) if verdict is not None else None


@dataclass(frozen=True, slots=True)
class ContractTerms:
    scope: tuple[ScopeEntry, ...] = ()
    approval_required: bool = False
    required_for: tuple[str, ...] = ()

    @classmethod
    def of(cls, contract: DutyContract | None) -> ContractTerms:
        if contract is None:
            return cls()
        entries = (parse_scope_entry(text) for text in contract.decision_scope)
        approval = contract.approval
        return cls(
            scope=tuple(e for e in entries if e is not None),
            approval_required=_truthy(approval.get("required")),
            required_for=_strings(approval.get("required_for")),
        )

    def matching(self, verdict: ScopeVerdict, actions: Iterable[str]) -> tuple[tuple[str, ScopeEntry], ...]:
        """(action, entry) pairs where a requested action touches an entry of this verdict."""
        return tuple(
            (action, entry)
            for action in actions
            for entry in self.scope
            if entry.verdict == verdict and _overlap(_words(action), entry.words)
        )

    def authorised(self, actions: Iterable[str]) -> bool:
        """Every action is covered by an `auto` entry and touched by no stricter one."""
        listed = tuple(actions)
        if not listed:
            return False
        stricter = [e for e in self.scope if e.verdict != "auto"]
        return all(
            any(e.verdict == "auto" and _contains(e.words, _words(a)) for e in self.scope)
            and not any(_overlap(_words(a), e.words) for e in stricter)
            for a in listed
        )

    def approval_for(self, actions: Iterable[str]) -> tuple[str, ...]:
        """Requested actions that `approval.required_for` names."""
        return tuple(a for a in actions if any(_overlap(_words(a), _words(item)) for item in self.required_for))


def _words(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(text.casefold()))


def _contains(haystack: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    if not needle:
        return False
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return _contains(a, b) or _contains(b, a)


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().casefold() in _TRUE_WORDS
    return value is True


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, tuple | list):
        return tuple(str(v) for v in value)
    return ()
