"""What a tool does to the world, as the workspace files declare it: the effect and risk
vocabulary, and effect tables (`tool_effects.yml` / `.yaml` sidecars, PERSONA.md and TENANT.json
`tool_effect_overrides`).

A table maps exact tool names and fnmatch patterns (`github__*`) to rules; inside one table an
exact name comes before the patterns, and patterns apply in file order. How tables are layered
over a tool's own spec is `tools/effects.py` (`EffectResolver`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, field_validator

from genworker.workspace.errors import Issue, WorkspaceError

__all__ = [
    "DEFAULT_RISK",
    "EMPTY_TABLE",
    "SIDECAR_NAMES",
    "Effect",
    "EffectRule",
    "EffectTable",
    "ResourceDecl",
    "RiskLevel",
    "load_effect_table",
]


class Effect(StrEnum):
    READ = "read"
    COMPUTE = "compute"
    WRITE = "write"
    EXTERNAL = "external"
    DELEGATE = "delegate"


class RiskLevel(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


SIDECAR_NAMES = ("tool_effects.yml", "tool_effects.yaml")
DEFAULT_RISK: Mapping[Effect, RiskLevel] = MappingProxyType(
    {
        Effect.READ: RiskLevel.LOW,
        Effect.COMPUTE: RiskLevel.LOW,
        Effect.WRITE: RiskLevel.MEDIUM,
        Effect.EXTERNAL: RiskLevel.HIGH,
        Effect.DELEGATE: RiskLevel.HIGH,
    }
)
_KEY = re.compile(r"^[A-Za-z0-9_\-*?\[\]!]{1,128}$")
_GLOB = re.compile(r"[*?\[]")


Reversibility = Literal["reversible", "undo_window", "irreversible"]
_PLACEHOLDER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


@dataclass(frozen=True, slots=True)
class ResourceDecl:
    """The resource one call changes, for the Conflict Arbiter (docs/conflicts.md): `key` and
    `operation` are templates filled from the call's arguments (`github:issue:{number}`)."""

    key: str
    operation: str | None = None  # None: the tool's name
    reversibility: Reversibility | None = None  # None: write is reversible, external / delegate undo_window
    version_arg: str | None = None  # the argument carrying the version the caller read (ETag, updated_at)
    version_result: str | None = None  # the key of the result's data carrying the version after the call

    def fill(self, tool: str, arguments: Mapping[str, Any]) -> tuple[str, str, str | None] | None:
        """(resource key, operation, expected version) for one call; None when an argument the key
        names is missing."""
        try:
            key = self.key.format_map(_Args(arguments))
            operation = (self.operation or tool).format_map(_Args(arguments))
        except KeyError:
            return None
        version = arguments.get(self.version_arg) if self.version_arg else None
        return key, operation, None if version in (None, "") else str(version)


class _Args(dict[str, str]):
    def __init__(self, arguments: Mapping[str, Any]) -> None:
        super().__init__({k: str(v) for k, v in arguments.items() if isinstance(v, str | int | float)})


def _template(value: str) -> str:
    """Only `{name}` placeholders: no attribute or index access, conversion or format spec."""
    try:
        parts = list(string.Formatter().parse(value))
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a template: {exc}") from None
    for _, name, spec, conversion in parts:
        if name is not None and (not _PLACEHOLDER.match(name) or spec or conversion):
            raise ValueError(f"{value!r}: placeholders are argument names such as {{number}}, got {{{name}}}")
    return value


@dataclass(frozen=True, slots=True)
class EffectRule:
    """One table entry; None means "not declared here, ask the next layer" (false never waives approval)."""

    effect: Effect | None = None
    risk_level: RiskLevel | None = None
    requires_approval: bool | None = None
    resource: ResourceDecl | None = None


class _ResourceModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=300)
    operation: str | None = Field(default=None, min_length=1, max_length=200)
    reversibility: Reversibility | None = None
    version_arg: str | None = Field(default=None, pattern=_PLACEHOLDER.pattern)
    version_result: str | None = Field(default=None, pattern=_PLACEHOLDER.pattern)

    @field_validator("key", "operation")
    @classmethod
    def _templates(cls, value: str | None) -> str | None:
        return _template(value) if value is not None else None


class _RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    effect: Effect | None = None
    risk_level: RiskLevel | None = None
    requires_approval: StrictBool | None = None
    resource: _ResourceModel | None = None


@dataclass(frozen=True, slots=True)
class EffectTable:
    """Rules by exact tool name plus fnmatch patterns, from one file or override mapping."""

    source: str
    exact: Mapping[str, EffectRule]
    patterns: tuple[tuple[str, EffectRule], ...] = ()

    def matches(self, name: str) -> Iterator[EffectRule]:
        rule = self.exact.get(name)
        if rule is not None:
            yield rule
        for pattern, rule in self.patterns:
            if fnmatchcase(name, pattern):
                yield rule

    @classmethod
    def from_mapping(cls, data: object, source: str, field_prefix: str = "") -> EffectTable:
        """Validate `{tool or pattern: {effect, risk_level, requires_approval, resource}}`.

        Raises WorkspaceError naming `source`, the tool key and the field at fault.
        """
        prefix = f"{field_prefix}." if field_prefix else ""
        if data is None:
            return cls(source, MappingProxyType({}))
        if not isinstance(data, Mapping):
            raise WorkspaceError.single(
                source, f"must be a mapping of tool name to effect, got {type(data).__name__}", field_prefix
            )
        issues: list[Issue] = []
        exact: dict[str, EffectRule] = {}
        patterns: list[tuple[str, EffectRule]] = []
        for key, value in data.items():
            if not isinstance(key, str) or not _KEY.match(key):
                issues.append(Issue("error", source, "is not a tool name or fnmatch pattern", f"{prefix}{key}"))
                continue
            rule = _parse_rule(value, source, f"{prefix}{key}", issues)
            if rule is None:
                continue
            if _GLOB.search(key):
                patterns.append((key, rule))
            else:
                exact[key] = rule
        if issues:
            raise WorkspaceError(issues)
        return cls(source, MappingProxyType(exact), tuple(patterns))


EMPTY_TABLE = EffectTable("", MappingProxyType({}))


def _parse_rule(value: object, source: str, where: str, issues: list[Issue]) -> EffectRule | None:
    if not isinstance(value, Mapping):
        issues.append(
            Issue("error", source, "must be a mapping with effect / risk_level / requires_approval / resource", where)
        )
        return None
    try:
        model = _RuleModel.model_validate(value)
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"])
            issues.append(Issue("error", source, err["msg"], f"{where}.{field}" if field else where))
        return None
    resource = ResourceDecl(**model.resource.model_dump()) if model.resource is not None else None
    rule = EffectRule(model.effect, model.risk_level, model.requires_approval, resource)
    if rule == EffectRule():
        issues.append(Issue("error", source, "declares none of effect, risk_level, requires_approval, resource", where))
        return None
    return rule


def load_effect_table(path: Path, display: str | None = None) -> EffectTable:
    """Read one sidecar file; errors name `display` (default: the path)."""
    source = display or path.as_posix()
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise WorkspaceError.single(source, f"invalid YAML: {exc.problem}", line=line) from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise WorkspaceError.single(source, f"cannot read: {exc}") from None
    return EffectTable.from_mapping(data, source)
