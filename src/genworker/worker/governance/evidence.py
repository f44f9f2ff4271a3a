"""What an inferred action brings to the Policy Gate, read from the fact that triggered it.

A sensor, a webhook caller or a planner that decided something should happen puts these fields
in the fact's payload (an inbox item or a bus event); the heartbeat and the duty scheduler pass
them to the router, and the router to governance:

| payload field | meaning |
|---|---|
| `confidence` | a number 0..1: how sure the inference is |
| `evidence_sources` (or `sources`) | ids of the independent signals that agree, each listed once |
| `requested_actions` | the action names the task will take (`internal_status_transition` ...) |
| `requested_effects` | the tool effects it needs (`read`, `write`, `external` ...) |

Every field is optional; a malformed one raises GovernanceInputError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from genworker.tools.base import Effect
from genworker.worker.governance.errors import GovernanceInputError

__all__ = ["NO_EVIDENCE", "Evidence", "evidence_from"]

_SOURCES: Final = ("evidence_sources", "sources")


@dataclass(frozen=True, slots=True)
class Evidence:
    confidence: float | None = None
    sources: tuple[str, ...] = ()  # distinct source ids
    actions: tuple[str, ...] = ()
    effects: frozenset[Effect] | None = None  # None: not declared

    def as_json(self) -> dict[str, Any]:
        """The payload fields again (what a confirmation stores to route the approved run the same way)."""
        data: dict[str, Any] = {}
        if self.confidence is not None:
            data["confidence"] = self.confidence
        if self.sources:
            data["evidence_sources"] = list(self.sources)
        if self.actions:
            data["requested_actions"] = list(self.actions)
        if self.effects is not None:
            data["requested_effects"] = sorted(e.value for e in self.effects)
        return data


NO_EVIDENCE: Final = Evidence()


def evidence_from(payload: Mapping[str, Any], where: str = "payload") -> Evidence:
    """The evidence fields of `payload`; `where` prefixes the field named in an error."""
    given = [name for name in _SOURCES if name in payload]
    if len(given) > 1:
        raise GovernanceInputError(f"{where}: give one of evidence_sources or sources, not both")
    sources_field = given[0] if given else _SOURCES[0]
    effects = payload.get("requested_effects")
    return Evidence(
        confidence=_confidence(payload.get("confidence"), f"{where}.confidence"),
        sources=_names(payload.get(sources_field), f"{where}.{sources_field}", distinct=True),
        actions=_names(payload.get("requested_actions"), f"{where}.requested_actions", distinct=False),
        effects=_effects(effects, f"{where}.requested_effects") if effects is not None else None,
    )


def _confidence(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise GovernanceInputError(f"{field} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _names(value: Any, field: str, *, distinct: bool) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise GovernanceInputError(f"{field} must be a list of non-empty strings, got {value!r}")
    names = tuple(v.strip() for v in value)
    if distinct and len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise GovernanceInputError(f"{field} lists {repeated} more than once; list each independent source once")
    return names


def _effects(value: Any, field: str) -> frozenset[Effect]:
    allowed = [e.value for e in Effect]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v in allowed for v in value):
        raise GovernanceInputError(f"{field} must be a list of {allowed}, got {value!r}")
    return frozenset(Effect(v) for v in value)
