"""Errors of the MCP client package: an unusable server. (A misconfigured `mcp_servers` entry is
`workspace.errors.MCPConfigError`.)"""

from __future__ import annotations

__all__ = ["MCPUnavailableError"]


class MCPUnavailableError(RuntimeError):
    """The server is not connected (never started, stopped, or lost)."""
