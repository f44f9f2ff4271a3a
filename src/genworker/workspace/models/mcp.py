"""`mcp_servers` entries: which MCP servers a tenant or worker connects to, and how.

One entry is either a local server launched over stdio (`command`, `args`, `env`, `cwd`) or a
remote server reached over streamable HTTP (`url`, `headers`). `env` and `headers` values are
secrets: redacted in repr, str and validation errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    WrapSerializer,
    model_validator,
)

from genworker.workspace.errors import MCPConfigError
from genworker.workspace.models.effects import DEFAULT_RISK, Effect, RiskLevel

__all__ = [
    "MCPServerConfig",
    "MCPToolEffect",
    "Transport",
    "parse_mcp_servers",
]

Transport = Literal["stdio", "http"]

_SERVER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0}


def _server_name(value: str) -> str:
    if not _SERVER_NAME.match(value) or "__" in value or value.endswith("_"):
        raise ValueError(
            "must be 1-32 letters, digits, '-' or '_', start with a letter or digit, "
            "and contain no '__' nor end with '_' (tools are named '<server>__<tool>')"
        )
    return value


def _seconds(value: Any) -> Any:
    if isinstance(value, str) and (match := _SECONDS.match(value)):
        return float(match.group(1)) * _UNIT[match.group(2) or "s"]
    return value


def _check_names(value: Mapping[str, SecretStr], pattern: re.Pattern[str], what: str) -> None:
    bad = [key for key in value if not pattern.match(key)]
    if bad:
        raise ValueError(f"invalid {what} name(s): {', '.join(map(repr, bad))}")


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


ServerName = Annotated[str, AfterValidator(_server_name)]
V = TypeVar("V")
FrozenMap = Annotated[
    Mapping[str, V],
    AfterValidator(MappingProxyType),
    WrapSerializer(lambda value, handler: handler(dict(value))),
]
Seconds = Annotated[float, BeforeValidator(_seconds), Field(gt=0, le=3600)]


class MCPToolEffect(BaseModel):
    """What a server's tool does, declared by whoever configures the server."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    effect: Effect
    risk_level: RiskLevel | None = None  # None: the effect's default (DEFAULT_RISK)
    requires_approval: bool = False

    @property
    def risk(self) -> RiskLevel:
        return self.risk_level or DEFAULT_RISK[self.effect]


class MCPServerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    name: ServerName
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: FrozenMap[SecretStr] = Field(default_factory=_empty, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: FrozenMap[SecretStr] = Field(default_factory=_empty, repr=False)
    tool_effects: FrozenMap[MCPToolEffect] = Field(default_factory=_empty)
    trust_annotations: bool = False  # map the server's readOnlyHint to a declared `read` effect
    start_timeout: Seconds = 30.0
    call_timeout: Seconds = 60.0
    enabled: bool = True

    @model_validator(mode="before")
    @classmethod
    def _infer_transport(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "transport" not in data:
            if "url" in data and "command" not in data:
                return {**data, "transport": "http"}
            if "command" in data and "url" not in data:
                return {**data, "transport": "stdio"}
        return data

    @model_validator(mode="after")
    def _check_transport_fields(self) -> Self:
        if self.transport == "stdio":
            if not self.command:
                raise ValueError("a stdio server needs a 'command'")
            misplaced = [f for f in ("url", "headers") if getattr(self, f)]
        else:
            if not self.url or not self.url.startswith(("http://", "https://")):
                raise ValueError("an http server needs a 'url' starting with http:// or https://")
            misplaced = [f for f in ("command", "args", "env", "cwd") if getattr(self, f)]
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)} not allowed with transport {self.transport!r}")
        _check_names(self.env, _ENV_NAME, "environment variable")
        _check_names(self.headers, _HEADER_NAME, "header")
        empty = [key for key in self.tool_effects if not key.strip()]
        if empty:
            raise ValueError("tool_effects keys must be tool names or glob patterns, not empty")
        return self

    @property
    def remote(self) -> bool:
        return self.transport == "http"


def parse_mcp_servers(
    raw: Sequence[Mapping[str, Any]] | None, source: str, *, base_dir: Path | None = None
) -> tuple[MCPServerConfig, ...]:
    """Validate an `mcp_servers` list from `source` (a file name, for the error message).

    A relative `cwd` is resolved against `base_dir` (the worker or tenant folder); without one
    it is an error. Raises MCPConfigError listing every invalid entry and field.
    """
    if raw is None:
        return ()
    if isinstance(raw, str | bytes) or not isinstance(raw, Sequence):
        raise MCPConfigError(source, ["mcp_servers must be a list of server entries"])
    configs: list[MCPServerConfig] = []
    issues: list[str] = []
    for index, entry in enumerate(raw):
        where = _where(index, entry)
        try:
            config = MCPServerConfig.model_validate(entry)
        except ValidationError as exc:
            issues.extend(f"{where}: {_describe(err)}" for err in exc.errors())
            continue
        if config.cwd and not Path(config.cwd).is_absolute():
            if base_dir is None:
                issues.append(f"{where}: field 'cwd': must be absolute here, got {config.cwd!r}")
                continue
            config = config.model_copy(update={"cwd": str(base_dir / config.cwd)})
        if any(c.name == config.name for c in configs):
            issues.append(f"{where}: duplicate server name {config.name!r}")
            continue
        configs.append(config)
    if issues:
        raise MCPConfigError(source, issues)
    return tuple(configs)


def _where(index: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"mcp_servers[{index}]" + (f" ({name!r})" if isinstance(name, str) else "")


def _describe(error: Any) -> str:
    loc = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"field '{loc}': {message}" if loc else message
