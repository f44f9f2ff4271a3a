"""Errors of the MCP client package: misconfiguration versus an unusable server."""

from __future__ import annotations

__all__ = ["MCPConfigError", "MCPUnavailableError"]


class MCPConfigError(ValueError):
    """An `mcp_servers` entry is invalid. Names the file, the entry and each field at fault."""

    def __init__(self, source: str, issues: list[str]) -> None:
        self.source = source
        self.issues = issues
        super().__init__(f"{source}: invalid mcp_servers: " + "; ".join(issues))


class MCPUnavailableError(RuntimeError):
    """The server is not connected (never started, stopped, or lost)."""
