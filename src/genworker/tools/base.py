"""What a tool is described and called with: its spec (name, JSON schema, effect, risk), a call,
and a result. Anything the pipeline executes (`Tool`) and `@function_tool` are `tools/tool.py`.

Schemas come from type hints and the docstring through one function (`tool_spec_from`);
misuse of `@function_tool` fails at import time, not at the first call.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from genworker.workspace.models.effects import Effect, RiskLevel

__all__ = [
    "HIDDEN_FROM_LLM",
    "Effect",
    "RiskLevel",
    "Suspend",
    "ToolCall",
    "ToolDefinitionError",
    "ToolResult",
    "ToolSpec",
    "tool_spec_from",
]

HIDDEN_FROM_LLM = "hidden_from_llm"
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolDefinitionError(TypeError):
    """A tool is declared wrongly (bad name, unsupported parameter type, no docstring)."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments object
    effect: Effect | None = None  # None: undeclared -> treated as high-risk external
    risk_level: RiskLevel = RiskLevel.HIGH
    requires_approval: bool = False
    tags: frozenset[str] = frozenset()
    source: str = "builtin"  # builtin | script | mcp:<server>

    @property
    def declared(self) -> bool:
        return self.effect is not None

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.parameters)},
        }


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Suspend:
    """A tool result's `data` that ends the run without failing it: the run now waits (e.g. for an
    event); `message` tells the user what it waits for."""

    message: str
    ref: str = ""  # what the run waits on, e.g. a WAITING plan id


@dataclass(frozen=True, slots=True)
class ToolResult:
    content: str
    is_error: bool = False
    data: Any = None


_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def tool_spec_from(fn: Callable[..., Any], *, name: str | None = None) -> tuple[ToolSpec, bool]:
    """Build the spec from `fn`'s signature, type hints and docstring ('Args:' section)."""
    tool_name = name or fn.__name__
    if not _TOOL_NAME.match(tool_name):
        raise ToolDefinitionError(f"tool name {tool_name!r} must match {_TOOL_NAME.pattern}")
    doc = inspect.getdoc(fn)
    if not doc:
        raise ToolDefinitionError(f"tool {tool_name} needs a docstring: it is the description the model sees")
    summary, arg_docs = _parse_doc(doc)
    hints = get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())
    takes_context = bool(params) and params[0].name == "ctx"
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in params[1:] if takes_context else params:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {tool_name}: *args/**kwargs are not allowed")
        if param.name not in hints:
            raise ToolDefinitionError(f"tool {tool_name}: parameter {param.name!r} needs a type hint")
        schema = _schema_of(hints[param.name], f"{tool_name}.{param.name}")
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        else:
            schema["default"] = param.default
        properties[param.name] = schema
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return ToolSpec(tool_name, summary, parameters), takes_context


def _schema_of(hint: Any, where: str) -> dict[str, Any]:
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    origin = get_origin(hint)
    if origin is Literal:
        return {"enum": list(get_args(hint))}
    if origin in (list, tuple) and get_args(hint):
        return {"type": "array", "items": _schema_of(get_args(hint)[0], where)}
    if origin in (dict, Mapping) or hint is dict:
        return {"type": "object"}
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return {**_schema_of(args[0], where), "nullable": True}
    raise ToolDefinitionError(f"{where}: unsupported parameter type {hint!r}")


def _parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        if line.strip() in ("Args:", "Arguments:"):
            in_args = True
            continue
        if in_args:
            match = re.match(r"^\s+(\w+)\s*(?:\([^)]*\))?:\s*(.+)$", line)
            if match:
                args[match.group(1)] = match.group(2).strip()
                continue
            if line.strip() and not line.startswith(" "):
                in_args = False
        if not in_args:
            summary_lines.append(line)
    return "\n".join(summary_lines).strip(), args
