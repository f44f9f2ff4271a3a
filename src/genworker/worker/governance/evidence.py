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
| `planned_effects` | what it will change, for the Conflict Arbiter: `[{resource_key, operation, ...}]` |

Every field is optional; a malformed one raises GovernanceInputError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from genworker.tools.base import Effect
from genworker.worker.governance.errors import GovernanceInputError
from genworker.workspace.models.effects import Reversibility

__all__ = ["NO_EVIDENCE", "Evidence", "PlannedEffect", "evidence_from"]

_SOURCES: Final = ("evidence_sources", "sources")


_REVERSIBILITY: Final = ("reversible", "undo_window", "irreversible")


@dataclass(frozen=True, slots=True)
class PlannedEffect:
    """One resource the task will change (Steward's PlanEffect), registered with the Conflict Arbiter
    when the run is admitted (docs/conflicts.md)."""

    resource_key: str
    operation: str
    expected_version: str | None = None
    reversibility: Reversibility = "reversible"

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"resource_key": self.resource_key, "operation": self.operation}
        if self.expected_version is not None:
            data["expected_version"] = self.expected_version
        return data | {"reversibility": self.reversibility}


@dataclass(frozen=True, slots=True)
class Evidence:
    confidence: float | None = None
    sources: tuple[str, ...] = ()  # distinct source ids
    actions: tuple[str, ...] = ()
    effects: frozenset[Effect] | None = None  # None: not declared
    planned: tuple[PlannedEffect, ...] = ()

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
        if self.planned:
            data["planned_effects"] = [p.as_json() for p in self.planned]
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
        planned=_planned(payload.get("planned_effects"), f"{where}.planned_effects"),
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


_PLANNED_FIELDS: Final = frozenset({"resource_key", "operation", "expected_version", "reversibility"})


def _planned(value: Any, field: str) -> tuple[PlannedEffect, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or len(value) > 50:
        raise GovernanceInputError(f"{field} must be a list of at most 50 effects, got {type(value).__name__}")
    return tuple(_planned_effect(item, f"{field}[{i}]") for i, item in enumerate(value))


def _planned_effect(item: Any, where: str) -> PlannedEffect:
    if not isinstance(item, Mapping) or set(item) - _PLANNED_FIELDS:
        raise GovernanceInputError(f"{where} must be an object with {', '.join(sorted(_PLANNED_FIELDS))}")
    texts = []
    for name in ("resource_key", "operation"):
        text = item.get(name)
        if not isinstance(text, str) or not text.strip() or len(text) > 300:
            raise GovernanceInputError(f"{where}.{name} must be a non-empty string of at most 300 characters")
        texts.append(text.strip())
    version = item.get("expected_version")
    if version is not None and (not isinstance(version, str | int) or isinstance(version, bool)):
        raise GovernanceInputError(f"{where}.expected_version must be a string, got {version!r}")
    reversibility = item.get("reversibility", "reversible")
    if reversibility not in _REVERSIBILITY:
        raise GovernanceInputError(f"{where}.reversibility must be one of {list(_REVERSIBILITY)}")
    return PlannedEffect(texts[0], texts[1], None if version is None else str(version), reversibility)
