"""One MCP server connection, owned by one long-lived task.

anyio context managers (the transport, the ClientSession) must be entered and exited in the
same task, so each server gets a task that opens them, reports ready, parks until it is
stopped or the connection ends, and closes them. Tool calls from other tasks go through the
session while it is up.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TextIO, cast

import anyio
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.message import SessionMessage

from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus
from genworker.tools.mcp.errors import MCPUnavailableError
from genworker.workspace.models.mcp import MCPServerConfig

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream, TransportStreams

__all__ = ["CLIENT_INFO", "MCPConnection"]

CLIENT_INFO = mcp_types.Implementation(name="genworker", version="0.1.0")
_STDERR_TAIL = 1500
_MAX_TOOL_PAGES = 50


class MCPConnection:
    """A server's session and status. `on_change` runs after each status change."""

    def __init__(self, config: MCPServerConfig, on_change: Callable[[MCPConnection], None]) -> None:
        self.config = config
        self.tools: list[mcp_types.Tool] = []
        self._on_change = on_change
        self._status = ComponentRuntimeStatus(
            f"mcp:{config.name}", ComponentStatus.DEGRADED, "starting", backend=config.transport
        )
        self._details: dict[str, Any] = {}
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopping = False
        self._lost_reason = ""

    @property
    def status(self) -> ComponentRuntimeStatus:
        return self._status

    async def start(self) -> None:
        """Launch the server task; return once it is ready or has failed (within start_timeout)."""
        if self._task is not None:
            raise RuntimeError(f"MCP server {self.config.name!r} was already started")
        self._scope = anyio.CancelScope()
        settled = anyio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(settled), name=self._status.name)
        await settled.wait()

    async def stop(self) -> None:
        """Close the session and the transport (the subprocess is terminated, then killed)."""
        self._stopping = True
        if self._scope is not None:
            self._scope.cancel()
        if self._task is not None:
            await self._task

    async def call(self, name: str, arguments: dict[str, Any], *, read_timeout_s: float) -> mcp_types.CallToolResult:
        """Call a tool on the server. Raises MCPUnavailableError, or MCPError from the server."""
        session = self._session
        if session is None:
            raise MCPUnavailableError(f"MCP server {self.config.name!r} is not connected: {self._status.reason}")
        try:
            return await session.call_tool(name, arguments, read_timeout_seconds=read_timeout_s)
        except MCPError as exc:
            if exc.code != mcp_types.CONNECTION_CLOSED:
                raise
            self._lost(f"connection lost during a call to {name!r}")
            raise MCPUnavailableError(f"MCP server {self.config.name!r} closed the connection") from None

    async def _run(self, settled: anyio.Event) -> None:
        assert self._scope is not None
        errlog = await anyio.to_thread.run_sync(_stderr_file) if self.config.transport == "stdio" else None
        reason = ""
        try:
            with self._scope:
                try:
                    await self._serve(settled, errlog)
                    reason = "the server closed the connection"
                except Exception as exc:  # any failure of the server or its transport degrades it
                    reason = _describe(exc, self.config)
            if not self._stopping:
                reason = "; ".join(part for part in (self._lost_reason, reason) if part) + await _tail(errlog)
        finally:
            if errlog is not None:
                await anyio.to_thread.run_sync(errlog.close)
            self._session = None
            if self._stopping:
                self._set(ComponentStatus.DISABLED, "stopped")
            else:
                self._set(ComponentStatus.DEGRADED, reason or "the connection ended")
            settled.set()

    async def _serve(self, settled: anyio.Event, errlog: TextIO | None) -> None:
        async with self._transport(errlog) as (read, write):
            watched = _EndWatch(read)
            async with ClientSession(watched, write, client_info=CLIENT_INFO) as session:
                with anyio.fail_after(self.config.start_timeout):
                    init = await session.initialize()
                    self.tools = await _list_tools(session)
                self._session = session
                self._details = {"server": f"{init.server_info.name} {init.server_info.version}".strip()}
                self._set(ComponentStatus.READY, "")
                settled.set()
                await watched.ended.wait()

    @asynccontextmanager
    async def _transport(self, errlog: TextIO | None) -> AsyncIterator[TransportStreams]:
        config = self.config
        if config.transport == "stdio":
            assert config.command is not None and errlog is not None
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env={key: value.get_secret_value() for key, value in config.env.items()},
                cwd=config.cwd,
            )
            async with stdio_client(params, errlog=errlog) as streams:
                yield streams
        else:
            assert config.url is not None
            headers = {key: value.get_secret_value() for key, value in config.headers.items()}
            async with (
                create_mcp_http_client(headers=headers) as http,
                streamable_http_client(config.url, http_client=http) as streams,
            ):
                yield streams

    def _lost(self, reason: str) -> None:
        if self._session is None or self._stopping:
            return
        self._session = None
        self._lost_reason = reason
        self._set(ComponentStatus.DEGRADED, reason)
        if self._scope is not None:
            self._scope.cancel()

    def _set(self, status: ComponentStatus, reason: str) -> None:
        self._status = ComponentRuntimeStatus(self._status.name, status, reason, self.config.transport, self._details)
        if status is not ComponentStatus.READY:
            self.tools = []
        self._on_change(self)


class _EndWatch:
    """A transport read stream that sets `ended` when the server's side closes."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception]) -> None:
        self._inner = inner
        self.ended = anyio.Event()

    @property
    def last_context(self) -> Any:  # the SDK reads the sender's context from context-aware streams
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.ended.set()
            raise

    async def aclose(self) -> None:
        self.ended.set()
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _stderr_file() -> TextIO:
    return cast(TextIO, tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace"))


async def _tail(errlog: TextIO | None) -> str:
    if errlog is None:
        return ""

    def read() -> str:
        errlog.flush()
        size = errlog.seek(0, 2)
        errlog.seek(max(0, size - _STDERR_TAIL))
        return errlog.read().strip()

    text = await anyio.to_thread.run_sync(read)
    return f"; stderr: {text}" if text else ""


def _describe(exc: BaseException, config: MCPServerConfig) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no MCP handshake within {config.start_timeout:g}s"
    if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
        return "the server closed the connection"
    if isinstance(exc, FileNotFoundError | PermissionError) and config.transport == "stdio":
        return f"cannot run {config.command!r}: {exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"
