"""Script tools (L3 of the script channel): reusable scripts loaded from SCRIPT_TOOL_DIR.

Each tool is a script, `{stem}.py` or `{stem}.sh`, with a declaration beside it, `{stem}.yaml`:

    schema_version: 1
    name: weekly_numbers            # optional, defaults to the stem
    description: Sum this week's numbers.
    parameters: {type: object, properties: {week: {type: integer}}, required: [week]}
    effect: read                    # read | compute | write | external | delegate (required)
    risk_level: low                 # default: by effect
    requires_approval: false
    tags: [hidden_from_llm]         # hidden_from_llm: callable by scripts/workflows, never shown to the model
    timeout: 30s
    max_tool_calls: 20

A run starts the script in the sandbox with the arguments as one JSON object on stdin; what it
prints is the result, a non-zero exit an error. It can call other tools over the RPC bridge.
Files whose name starts with `_` or `.` are ignored.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from genworker.tools.base import Effect, RiskLevel, ToolDefinitionError, ToolResult, ToolSpec
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.validation import compile_schema
from genworker.tools.rpc_bridge import DEFAULT_MAX_CALLS, ScriptLanguage, ScriptNestingError, ToolExecutor, run_script
from genworker.tools.sandbox import DEFAULT_LIMITS, SandboxError, SandboxLimits
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models.base import Duration
from genworker.workspace.models.effects import DEFAULT_RISK

__all__ = [
    "SCRIPT_SCHEMA_VERSION",
    "ScriptDeclaration",
    "ScriptTool",
    "ScriptToolScan",
    "load_script_tools",
    "scan_script_tools",
]

SCRIPT_SCHEMA_VERSION = 1
_LANGUAGES: Mapping[str, ScriptLanguage] = {".py": "python", ".sh": "bash"}
_DECLARATIONS = (".yaml", ".yml")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ScriptDeclaration(BaseModel):
    """The sidecar `{stem}.yaml` of a script tool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    name: str | None = None
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    effect: Effect
    risk_level: RiskLevel | None = None
    requires_approval: bool = False
    tags: tuple[str, ...] = ()
    timeout: Duration | None = None
    max_tool_calls: int = Field(default=DEFAULT_MAX_CALLS, ge=0, le=1000)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _TOOL_NAME.match(value):
            raise ValueError(f"tool name {value!r} must be 1-64 letters, digits, '_' or '-'")
        return value

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError("must be a JSON schema with type: object (the arguments object)")
        return value


@dataclass(frozen=True, slots=True)
class ScriptTool:
    """A Tool running `script` in the sandbox. The source is read at each run, so edits apply."""

    spec: ToolSpec
    script: Path
    language: ScriptLanguage
    timeout_s: float | None = None
    max_calls: int = DEFAULT_MAX_CALLS
    executor: Callable[[], ToolExecutor] | None = None
    limits: SandboxLimits = field(default=DEFAULT_LIMITS)

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        source = await asyncio.to_thread(self.script.read_text, encoding="utf-8")
        try:
            result = await run_script(
                self.language,
                source,
                scope=ctx.scope,
                executor=self.executor() if self.executor is not None else None,
                call_id=ctx.call.id,
                limits=self.limits.for_call(self.timeout_s, ctx.timeout_s),
                stdin=json.dumps(dict(arguments), ensure_ascii=False).encode("utf-8"),
                max_calls=self.max_calls,
            )
        except ScriptNestingError as exc:
            return ToolResult(str(exc), is_error=True)
        except SandboxError as exc:
            return ToolResult(f"{self.spec.name} could not start: {exc}", is_error=True)
        if result.ok:
            return ToolResult(result.stdout, data=result.as_dict())
        return ToolResult(result.report(), is_error=True, data=result.as_dict())


@dataclass(frozen=True, slots=True)
class ScriptToolScan:
    tools: tuple[ScriptTool, ...]
    issues: tuple[Issue, ...]  # each names the file and the field at fault


def load_script_tools(
    directory: Path,
    *,
    executor: Callable[[], ToolExecutor] | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> list[ScriptTool]:
    """Every script tool in `directory`; any invalid one raises WorkspaceError listing all problems."""
    scan = scan_script_tools(directory, executor=executor, limits=limits)
    if scan.issues:
        raise WorkspaceError(scan.issues)
    return list(scan.tools)


def scan_script_tools(
    directory: Path,
    *,
    executor: Callable[[], ToolExecutor] | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> ScriptToolScan:
    """The valid script tools of `directory` plus an Issue per invalid file (one bad file spares the rest)."""
    if not directory.is_dir():
        return ScriptToolScan((), (Issue("error", str(directory), "SCRIPT_TOOL_DIR is not a directory"),))
    files = sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(("_", ".")))
    scripts: dict[str, list[Path]] = {}
    declarations: dict[str, list[Path]] = {}
    for path in files:
        if path.suffix in _LANGUAGES:
            scripts.setdefault(path.stem, []).append(path)
        elif path.suffix in _DECLARATIONS:
            declarations.setdefault(path.stem, []).append(path)
    tools: list[ScriptTool] = []
    issues: list[Issue] = []
    for stem in sorted(scripts.keys() | declarations.keys()):
        found = _pair(stem, scripts.get(stem, []), declarations.get(stem, []), issues)
        if found is not None:
            tool = _load(*found, executor=executor, limits=limits, issues=issues)
            if tool is not None:
                tools.append(tool)
    return ScriptToolScan(tuple(_unique(tools, issues)), tuple(issues))


def _pair(stem: str, scripts: list[Path], declarations: list[Path], issues: list[Issue]) -> tuple[Path, Path] | None:
    if len(declarations) > 1:
        issues.append(Issue("error", str(declarations[0]), f"both {stem}.yaml and {stem}.yml: keep one"))
    elif not declarations:
        issues.append(Issue("error", str(scripts[0]), f"script tool needs a declaration {stem}.yaml next to it"))
    elif len(scripts) > 1:
        issues.append(Issue("error", str(declarations[0]), f"both {stem}.py and {stem}.sh: keep one", "script"))
    elif not scripts:
        issues.append(Issue("error", str(declarations[0]), f"no script {stem}.py or {stem}.sh next to it", "script"))
    else:
        return scripts[0], declarations[0]
    return None


def _load(
    script: Path,
    declaration: Path,
    *,
    executor: Callable[[], ToolExecutor] | None,
    limits: SandboxLimits,
    issues: list[Issue],
) -> ScriptTool | None:
    file = str(declaration)
    try:
        raw = yaml.safe_load(declaration.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        issues.append(Issue("error", file, f"cannot read: {exc}"))
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        issues.append(Issue("error", file, f"invalid YAML: {exc}", line=mark.line + 1 if mark else None))
        return None
    if not isinstance(raw, dict):
        issues.append(Issue("error", file, "the declaration must be a YAML mapping"))
        return None
    if "schema_version" in raw and raw["schema_version"] != SCRIPT_SCHEMA_VERSION:
        issues.append(
            Issue("error", file, f"unknown schema_version {raw['schema_version']!r}; supported: 1", "schema_version")
        )
        return None
    try:
        decl = ScriptDeclaration.model_validate(raw)
    except ValidationError as exc:
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"])
            issues.append(Issue("error", file, error["msg"], where))
        return None
    spec = ToolSpec(
        name=decl.name or script.stem,
        description=decl.description,
        parameters=decl.parameters,
        effect=decl.effect,
        risk_level=decl.risk_level or DEFAULT_RISK[decl.effect],
        requires_approval=decl.requires_approval,
        tags=frozenset(decl.tags),
        source="script",
    )
    if not _TOOL_NAME.match(spec.name):
        issues.append(Issue("error", file, f"file stem {spec.name!r} is not a valid tool name: set 'name'", "name"))
        return None
    try:
        compile_schema(spec)
    except ToolDefinitionError as exc:
        issues.append(Issue("error", file, str(exc), "parameters"))
        return None
    return ScriptTool(spec, script, _LANGUAGES[script.suffix], decl.timeout, decl.max_tool_calls, executor, limits)


def _unique(tools: list[ScriptTool], issues: list[Issue]) -> list[ScriptTool]:
    seen: dict[str, ScriptTool] = {}
    for tool in tools:
        if tool.spec.name in seen:
            message = f"tool name {tool.spec.name!r} is also used by {seen[tool.spec.name].script}"
            issues.append(Issue("error", str(tool.script), message, "name"))
        else:
            seen[tool.spec.name] = tool
    return list(seen.values())
