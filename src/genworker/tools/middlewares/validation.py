"""Arguments are checked against the tool's JSON schema before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from genworker.tools.base import ToolDefinitionError, ToolSpec
from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.outcomes import ToolFailed, ToolOutcome

__all__ = ["SchemaValidation", "compile_schema"]

_MAX_ERRORS = 5


def compile_schema(spec: ToolSpec) -> Validator:
    """A validator for `spec.parameters`; a broken schema raises ToolDefinitionError."""
    schema = _json_schema(spec.parameters)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ToolDefinitionError(f"tool {spec.name}: invalid parameters schema: {exc.message}") from None
    return cls(schema)


class SchemaValidation:
    """Middleware; validators are compiled once per registered tool (`prepare`) and dropped on `forget`."""

    def __init__(self) -> None:
        self._validators: dict[str, tuple[Mapping[str, Any], Validator]] = {}

    def prepare(self, spec: ToolSpec) -> None:
        self._validators[spec.name] = (spec.parameters, compile_schema(spec))

    def forget(self, name: str) -> None:
        self._validators.pop(name, None)

    def errors(self, spec: ToolSpec, arguments: object) -> list[str]:
        cached = self._validators.get(spec.name)
        validator = cached[1] if cached is not None and cached[0] is spec.parameters else compile_schema(spec)
        instance: Any = dict(arguments) if isinstance(arguments, Mapping) else arguments
        found = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
        return [_describe(e.absolute_path, e.message) for e in found[:_MAX_ERRORS]]

    async def __call__(self, ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        problems = self.errors(ctx.spec, ctx.call.arguments)
        if problems:
            return ToolFailed("invalid_arguments", f"invalid arguments for {ctx.spec.name}: " + "; ".join(problems))
        return await call_next(ctx)


def _describe(path: Any, message: str) -> str:
    where = "/".join(str(p) for p in path)
    return f"{where}: {message}" if where else message


def _json_schema(schema: Any) -> Any:
    """Turn the OpenAPI-style `nullable: true` that `tool_spec_from` emits into JSON Schema."""
    if isinstance(schema, Mapping):
        # a bool `nullable` is the keyword; a mapping is a property that happens to be named so
        out = {k: _json_schema(v) for k, v in schema.items() if not (k == "nullable" and isinstance(v, bool))}
        if schema.get("nullable") is True:
            if isinstance(out.get("type"), str):
                out["type"] = [out["type"], "null"]
            if isinstance(out.get("enum"), list) and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        return out
    if isinstance(schema, list | tuple):
        return [_json_schema(v) for v in schema]
    return schema
