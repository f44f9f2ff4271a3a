"""MCP client: tools of configured MCP servers, namespaced `server__tool`, run through the ToolPipeline.

Which servers a tenant or worker connects to (`mcp_servers`) is a workspace file model
(`workspace/models/mcp.py`). The manager and tools load the MCP SDK on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from genworker.tools.mcp.errors import MCPUnavailableError

if TYPE_CHECKING:
    from genworker.tools.mcp.manager import MCPManager, ToolRegistry
    from genworker.tools.mcp.tool import MCPTool

__all__ = [
    "MCPManager",
    "MCPTool",
    "MCPUnavailableError",
    "ToolRegistry",
]

_LAZY = {"MCPManager": "manager", "ToolRegistry": "manager", "MCPTool": "tool"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
