"""An MCP server's tool as a genworker Tool: namespaced spec, declared effect, result mapping."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp import MCPError
from mcp import types as mcp_types

from genworker.tools.base import Effect, RiskLevel, ToolResult, ToolSpec
from genworker.tools.mcp.errors import MCPUnavailableError
from genworker.workspace.models.mcp import MCPServerConfig, MCPToolEffect

if TYPE_CHECKING:
    from genworker.tools.context import ToolContext

__all__ = ["MCPTool", "build_tools", "namespaced_name", "to_tool_result", "tool_effect"]

MAX_TOOL_NAME = 64  # what LLM function-calling APIs accept
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class ToolCaller(Protocol):
    """The connection an MCPTool calls through (see client.MCPConnection)."""

    @property
    def config(self) -> MCPServerConfig: ...

    async def call(
        self, name: str, arguments: dict[str, Any], *, read_timeout_s: float
    ) -> mcp_types.CallToolResult: ...


def namespaced_name(server: str, tool: str) -> str | None:
    """`server__tool`, with characters outside [A-Za-z0-9_-] replaced by '_'; None if too long."""
    name = f"{server}__{_UNSAFE.sub('_', tool)}"
    return name if len(name) <= MAX_TOOL_NAME else None


def tool_effect(config: MCPServerConfig, tool: mcp_types.Tool) -> MCPToolEffect | None:
    """The declared effect: exact `tool_effects` key, else the first matching glob, else the
    server's readOnlyHint when `trust_annotations` is on, else None (undeclared)."""
    if tool.name in config.tool_effects:
        return config.tool_effects[tool.name]
    for pattern, declared in config.tool_effects.items():
        if fnmatch.fnmatchcase(tool.name, pattern):
            return declared
    if config.trust_annotations and tool.annotations is not None and tool.annotations.read_only_hint:
        return MCPToolEffect(effect=Effect.READ)
    return None


def build_spec(config: MCPServerConfig, tool: mcp_types.Tool, name: str) -> ToolSpec:
    declared = tool_effect(config, tool)
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    return ToolSpec(
        name=name,
        description=tool.description or title or "",
        parameters=tool.input_schema,
        effect=declared.effect if declared else None,
        risk_level=declared.risk if declared else RiskLevel.HIGH,
        requires_approval=declared.requires_approval if declared else False,
        tags=frozenset({"mcp"}),
        source=f"mcp:{config.name}",
    )


@dataclass(frozen=True, slots=True)
class MCPTool:
    spec: ToolSpec
    remote_name: str  # the tool's name on its server
    connection: ToolCaller
    tenant_id: str
    worker_id: str

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        if (ctx.scope.tenant_id, ctx.scope.worker_id) != (self.tenant_id, self.worker_id):
            # Each worker's servers are its own; a shared pipeline must never cross them.
            return ToolResult(f"{self.spec.name} is not available to this worker", is_error=True)
        timeout = min(self.connection.config.call_timeout, ctx.timeout_s)
        try:
            result = await self.connection.call(self.remote_name, dict(arguments), read_timeout_s=timeout)
        except MCPUnavailableError as exc:
            return ToolResult(str(exc), is_error=True)
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                raise TimeoutError(f"{self.spec.name} timed out after {timeout:g}s") from None
            return ToolResult(f"MCP error {exc.code}: {exc.message}", is_error=True)
        return to_tool_result(result)


def build_tools(
    connection: ToolCaller, tools: list[mcp_types.Tool], *, tenant_id: str, worker_id: str
) -> tuple[list[MCPTool], dict[str, str]]:
    """The server's tools as MCPTools, and {remote name: why skipped} for those that cannot be named."""
    server = connection.config.name
    built: dict[str, MCPTool] = {}
    skipped: dict[str, str] = {}
    for tool in tools:
        name = namespaced_name(server, tool.name)
        if name is None:
            skipped[tool.name] = f"'{server}__{tool.name}' is longer than {MAX_TOOL_NAME} characters"
        elif name in built:
            skipped[tool.name] = f"its name {name!r} collides with tool {built[name].remote_name!r}"
        else:
            spec = build_spec(connection.config, tool, name)
            built[name] = MCPTool(spec, tool.name, connection, tenant_id, worker_id)
    return list(built.values()), skipped


def to_tool_result(result: mcp_types.CallToolResult) -> ToolResult:
    parts = [_block_text(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return ToolResult(text, is_error=result.is_error, data=result.structured_content)


def _block_text(block: mcp_types.ContentBlock) -> str:
    match block:
        case mcp_types.TextContent(text=text):
            return text
        case mcp_types.ImageContent() | mcp_types.AudioContent():
            return f"[{block.type}: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
        case mcp_types.ResourceLink(uri=uri, name=name):
            return f"[resource link: {name} <{uri}>]"
        case mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents(text=text)):
            return text
        case mcp_types.EmbeddedResource(resource=resource):
            return f"[resource: <{resource.uri}> {resource.mime_type or 'binary'}]"
    return ""
