"""MCPManager: one worker's MCP servers, their statuses, and their tools in the ToolPipeline.

A ready server's tools are registered into the pipeline as `server__tool`; when the server
fails, dies or stops they are unregistered. A server that cannot start is `degraded` with
its reason and contributes no tools; a remote server the tenant does not allow, or one
switched off in its config, is `disabled`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus
from genworker.tools.base import ToolDefinitionError
from genworker.tools.mcp.client import MCPConnection
from genworker.tools.mcp.tool import MCPTool, build_tools
from genworker.tools.tool import Tool
from genworker.workspace.models.mcp import MCPServerConfig

__all__ = ["MCPManager", "ToolRegistry"]


class ToolRegistry(Protocol):
    """The part of the ToolPipeline the manager uses."""

    def register(self, tool: Tool) -> None: ...

    def unregister(self, name: str) -> object: ...


@dataclass(slots=True)
class _Server:
    config: MCPServerConfig
    connection: MCPConnection | None = None
    disabled: ComponentRuntimeStatus | None = None
    tools: list[MCPTool] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class MCPManager:
    """Starts, tracks and stops the MCP servers of one tenant's worker."""

    def __init__(
        self, registry: ToolRegistry, *, on_status: Callable[[ComponentRuntimeStatus], None] | None = None
    ) -> None:
        self._registry = registry
        self._on_status = on_status
        self._servers: dict[str, _Server] = {}
        self._tenant_id = ""
        self._worker_id = ""

    async def start(
        self, configs: Sequence[MCPServerConfig], *, tenant_id: str, worker_id: str, remote_allowed: bool
    ) -> None:
        """Connect to every enabled, allowed server at once; return when each is ready or degraded."""
        if self._servers:
            raise RuntimeError("MCPManager is already started; stop() it first")
        names = [config.name for config in configs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate MCP server names in {names}")
        self._tenant_id, self._worker_id = tenant_id, worker_id
        for config in configs:
            server = self._servers[config.name] = _Server(config)
            if not config.enabled:
                server.disabled = _disabled(config, "disabled in its configuration")
            elif config.remote and not remote_allowed:
                server.disabled = _disabled(
                    config, f"remote MCP servers are not allowed for tenant {tenant_id!r} (mcp_remote_allowed is false)"
                )
            else:
                server.connection = MCPConnection(config, self._changed)
        async with anyio.create_task_group() as tg:
            for server in self._servers.values():
                if server.connection is not None:
                    tg.start_soon(server.connection.start)

    async def stop(self) -> None:
        """Stop every server and unregister its tools. Safe to call more than once."""
        async with anyio.create_task_group() as tg:
            for server in self._servers.values():
                if server.connection is not None:
                    tg.start_soon(server.connection.stop)
        for server in self._servers.values():
            self._unregister(server)
        self._servers = {}

    def statuses(self) -> list[ComponentRuntimeStatus]:
        return [self._status(server) for server in self._servers.values()]

    def tools(self) -> list[Tool]:
        return [tool for server in self._servers.values() for tool in server.tools]

    def _status(self, server: _Server) -> ComponentRuntimeStatus:
        if server.disabled is not None:
            status = server.disabled
        else:
            assert server.connection is not None
            status = server.connection.status
        details = {**status.details, "tenant_id": self._tenant_id, "worker_id": self._worker_id}
        if status.status is ComponentStatus.READY:
            details["tools"] = sorted(tool.spec.name for tool in server.tools)
        if server.skipped:
            details["skipped_tools"] = dict(server.skipped)
        return ComponentRuntimeStatus(status.name, status.status, status.reason, status.backend, details)

    def _changed(self, connection: MCPConnection) -> None:
        server = self._servers.get(connection.config.name)
        if server is None or server.connection is not connection:
            return
        if connection.status.status is ComponentStatus.READY:
            self._register(server, connection)
        else:
            self._unregister(server)
        if self._on_status is not None:
            self._on_status(self._status(server))

    def _register(self, server: _Server, connection: MCPConnection) -> None:
        tools, server.skipped = build_tools(
            connection, connection.tools, tenant_id=self._tenant_id, worker_id=self._worker_id
        )
        for tool in tools:
            try:
                self._registry.register(tool)
            except ToolDefinitionError as exc:  # a name already taken, or an invalid input schema
                server.skipped[tool.remote_name] = str(exc)
                continue
            server.tools.append(tool)

    def _unregister(self, server: _Server) -> None:
        tools, server.tools = server.tools, []
        for tool in tools:
            self._registry.unregister(tool.spec.name)


def _disabled(config: MCPServerConfig, reason: str) -> ComponentRuntimeStatus:
    return ComponentRuntimeStatus(f"mcp:{config.name}", ComponentStatus.DISABLED, reason, config.transport)
