"""Shared building blocks of the workspace file models: frozen models, frozen JSON maps,
validated ids and durations."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainSerializer, SecretStr

from genworker.ids import InvalidIdError, validate_id

__all__ = [
    "Duration",
    "JsonMap",
    "Model",
    "SecretMap",
    "StrTuple",
    "WorkspaceId",
    "check_effect_table",
    "freeze",
    "parse_duration",
    "relative_path",
    "thaw",
    "unique_ids",
]


class Model(BaseModel):
    """Base of every workspace model: immutable; unknown keys are kept and reported."""

    # validate_default: defaults go through the same freezing as file values (no shared dicts)
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True, validate_default=True)
    open_extras: ClassVar[bool] = False  # True: extra keys are part of the format, not typos

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        # Field values are frozen (and MappingProxyType cannot be deep-copied): share them.
        return self.__copy__()


def freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


JsonMap = Annotated[
    Mapping[str, Any],
    AfterValidator(freeze),
    PlainSerializer(thaw, return_type=dict),
]


def _secret_leaves(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): _secret_leaves(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_secret_leaves(v) for v in value)
    if isinstance(value, str):
        return SecretStr(value)
    return value


SecretMap = Annotated[
    Mapping[str, Any],
    AfterValidator(_secret_leaves),
    PlainSerializer(thaw, return_type=dict),
]
"""A free-form map whose string leaves are secrets: redacted in repr and serialisation."""


def _check_id(value: str) -> str:
    try:
        return validate_id(value)
    except InvalidIdError as exc:
        raise ValueError(str(exc)) from None


WorkspaceId = Annotated[str, AfterValidator(_check_id)]


def _split_words(value: Any) -> Any:
    if isinstance(value, str):
        return (value,)
    return value


StrTuple = Annotated[tuple[str, ...], BeforeValidator(_split_words)]
"""A list of strings; a single string is accepted as a one-item list."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: Any) -> float:
    """'30s', '5m', '2h', '7d', '1w' or a number of seconds -> seconds (> 0)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like '30s', '5m', '2h', '7d'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    else:
        raise ValueError(f"expected a duration like '30s', '5m', '2h', '7d', got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("duration must be a finite number greater than zero")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds; written in files as '30s', '5m', '2h', '7d', '1w' or a plain number."""


def relative_path(value: str) -> str:
    parts = value.replace("\\", "/").split("/")
    if not value or value.startswith(("/", "\\")) or ".." in parts or "\0" in value:
        raise ValueError(f"must be a relative path inside the worker folder, got {value!r}")
    return value


def unique_ids(field: str, ids: list[str]) -> None:
    seen: set[str] = set()
    for item in ids:
        if item in seen:
            raise ValueError(f"{field}: duplicate id {item!r}")
        seen.add(item)


def check_effect_table(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """Validate a `tool_effect_overrides` mapping ({tool or pattern: {effect, risk_level, ...}})."""
    from genworker.tools.effects import EffectTable
    from genworker.workspace.errors import WorkspaceError

    try:
        EffectTable.from_mapping(value, "tool_effect_overrides")
    except WorkspaceError as exc:
        raise ValueError("; ".join(f"{i.field}: {i.message}" for i in exc.issues)) from None
    return value
