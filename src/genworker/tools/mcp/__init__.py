"""MCP client: tools of configured MCP servers, namespaced `server__tool`, run through the ToolPipeline.

The config and errors import cheaply (the workspace loader validates `mcp_servers` with them);
the manager and tools load the MCP SDK on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from genworker.tools.mcp.config import MCPServerConfig, MCPToolEffect, parse_mcp_servers
from genworker.tools.mcp.errors import MCPConfigError, MCPUnavailableError

if TYPE_CHECKING:
    from genworker.tools.mcp.manager import MCPManager, ToolRegistry
    from genworker.tools.mcp.tool import MCPTool

__all__ = [
    "MCPConfigError",
    "MCPManager",
    "MCPServerConfig",
    "MCPTool",
    "MCPToolEffect",
    "MCPUnavailableError",
    "ToolRegistry",
    "parse_mcp_servers",
]

_LAZY = {"MCPManager": "manager", "ToolRegistry": "manager", "MCPTool": "tool"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
