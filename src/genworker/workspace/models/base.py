"""Shared building blocks of the workspace file models: frozen models, frozen JSON maps,
validated ids and durations, and the recorder of compatibility notes (upstream spellings)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ModelWrapValidatorHandler,
    PlainSerializer,
    SecretStr,
    ValidationInfo,
    model_validator,
)

from genworker.ids import InvalidIdError, validate_id
from genworker.workspace.errors import WorkspaceError
from genworker.workspace.models.effects import EffectTable

__all__ = [
    "CsvTuple",
    "Duration",
    "JsonMap",
    "LowerStr",
    "Model",
    "NoteKind",
    "SecretMap",
    "StrTuple",
    "WorkspaceId",
    "check_effect_table",
    "freeze",
    "lower",
    "note",
    "parse_duration",
    "recording",
    "relative_path",
    "split_csv",
    "thaw",
    "unique_ids",
]

NoteKind = Literal["mapped", "ignored", "warning"]


@dataclass(slots=True)
class Recorder:
    """Notes made while one document is validated, attached to the model that made them."""

    current: list[tuple[str, NoteKind, str]] = field(default_factory=list)
    by_model: dict[int, tuple[BaseModel, list[tuple[str, NoteKind, str]]]] = field(default_factory=dict)


_RECORDER: ContextVar[Recorder | None] = ContextVar("genworker_compat_notes", default=None)


def note(field: str, kind: NoteKind, detail: str) -> None:
    """Record how a value in a file was read, from inside a model's validator.

    `field` is relative to the model being validated (dotted for sub-keys: "scope.skills");
    `validate()` turns it into the file's path and line. Kinds: "mapped" (an upstream spelling
    or value translated to ours: detail "completed -> done"), "ignored" (read and not used:
    detail says why), "warning" (loads, but the user should know: reported as a warning).
    Outside `validate()` (e.g. a model built in code) this does nothing.
    """
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.current.append((field, kind, detail))


@contextmanager
def recording() -> Iterator[Recorder]:
    recorder = Recorder()
    token = _RECORDER.set(recorder)
    try:
        yield recorder
    finally:
        _RECORDER.reset(token)


class Model(BaseModel):
    """Base of every workspace model: immutable; unknown keys are kept and reported.

    Numbers are accepted where text is expected (`version: 2`, `id: 1`), as upstream's
    parsers `str()` them; ids still go through `validate_id`. A key a model reads in a
    `mode="before"` validator (and removes) belongs in `compat_keys`, so a file that also has
    errors does not report it as unknown.
    """

    # validate_default: defaults go through the same freezing as file values (no shared dicts)
    model_config = ConfigDict(
        frozen=True, extra="allow", populate_by_name=True, validate_default=True, coerce_numbers_to_str=True
    )
    open_extras: ClassVar[bool] = False  # True: extra keys are part of the format, not typos
    compat_keys: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="wrap")
    @classmethod
    def _collect_notes(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        recorder = _RECORDER.get()
        if recorder is None:
            return handler(data)
        outer, recorder.current = recorder.current, []
        try:
            obj = handler(data)
            notes = recorder.current
        finally:
            recorder.current = outer
        if notes:
            recorder.by_model[id(obj)] = (obj, notes)
        return obj

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        # Field values are frozen (and MappingProxyType cannot be deep-copied): share them.
        return self.__copy__()


def lower(value: Any, info: ValidationInfo) -> Any:
    """BeforeValidator: compare enum-like text case-insensitively (upstream lower-cases it)."""
    if isinstance(value, str) and value != value.lower():
        note(info.field_name or "", "mapped", f"{value!r} -> {value.lower()!r}")
        return value.lower()
    return value


LowerStr = Annotated[str, BeforeValidator(lower)]
"""Text compared case-insensitively: stored lower-cased (wrap a Literal the same way)."""


def split_csv(value: Any) -> Any:
    """'a, b,c' -> ('a', 'b', 'c'); a list keeps its items (stripped); empty items are dropped."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple):
        return tuple(item.strip() if isinstance(item, str) else item for item in value)
    return value


CsvTuple = Annotated[tuple[str, ...], BeforeValidator(split_csv)]
"""A list of strings, also written as one comma-separated string (upstream's filter values)."""


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

_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_UNIT_WORDS = {
    **{w: "s" for w in ("sec", "secs", "second", "seconds")},
    **{w: "m" for w in ("min", "mins", "minute", "minutes")},
    **{w: "h" for w in ("hour", "hours")},
    **{w: "d" for w in ("day", "days")},
    **{w: "w" for w in ("week", "weeks")},
}
_NUMBER = r"(\d+(?:\.\d+)?)"
_SINGLE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z]*)\s*$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_COMPOUND = re.compile(r"^\s*(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w)\s*)+$")


def parse_duration(value: Any) -> float:
    """'30s', '5m', '2h', '7d', '1w', '30 days', compound '2h30m' or a number of seconds ->
    seconds (> 0)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like '30s', '5m', '2h', '7d'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (seconds_or_none := _parse_duration_text(value)) is not None:
        seconds = seconds_or_none
    else:
        raise ValueError(f"expected a duration like '30s', '5m', '2h', '7d', '2h30m', got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("duration must be a finite number greater than zero")
    return seconds


def _parse_duration_text(text: str) -> float | None:
    if match := _SINGLE.match(text):
        unit = match.group(2)
        unit = _UNIT_WORDS.get(unit.lower(), unit) if len(unit) > 2 else unit
        if unit and unit not in _UNIT_SECONDS:
            return None
        return float(match.group(1)) * _UNIT_SECONDS[unit or "s"]
    if _COMPOUND.match(text):
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text))
    return None


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds; written in files as '30s', '5m', '2h', '7d', '1w', '30 days', '2h30m' or a plain number."""


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
    try:
        EffectTable.from_mapping(value, "tool_effect_overrides")
    except WorkspaceError as exc:
        raise ValueError("; ".join(f"{i.field}: {i.message}" for i in exc.issues)) from None
    return value
