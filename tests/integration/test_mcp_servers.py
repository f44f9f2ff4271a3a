"""MCP servers for real: the third-party `mcp-server-time` over stdio, and a small server built
with the SDK's MCPServer (v1's FastMCP) over stdio and over streamable HTTP, all through the
real ToolPipeline."""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus
from genworker.tools.base import Effect, RiskLevel, ToolCall
from genworker.tools.context import Posture, ToolScope
from genworker.tools.mcp import MCPManager
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.mcp import parse_mcp_servers

pytestmark = pytest.mark.anyio

TIME = {"name": "time", "command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
WAIT = 15.0  # upper bound for a server to start or be noticed dead; tests finish long before

FIXTURE_SERVER = '''
import os, socket, sys
import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("fixture")

@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text

@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of a request header."""
    return (ctx.headers or {}).get(name, "")

@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()

@server.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.Event().wait()
    return "unreachable"

@server.tool()
def crash() -> str:
    """Exit the process at once."""
    os._exit(3)

@server.tool()
def fail() -> str:
    """Fail inside the tool."""
    raise ValueError("boom")  # MCPServer reports it without the message

if sys.argv[1] == "stdio":
    server.run("stdio")
else:
    import uvicorn
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections queue from here on, so the port is ready once printed
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [sock])
'''


@pytest.fixture
def fixture_server(tmp_path: Path) -> Path:
    path = tmp_path / "fixture_server.py"
    path.write_text(FIXTURE_SERVER, encoding="utf-8")
    return path


def stdio_fixture(script: Path, **fields: Any) -> dict[str, Any]:
    return {"name": "fx", "command": sys.executable, "args": [str(script), "stdio"], **fields}


def scope(trust_level: int = 2, posture: Posture = "normal", tenant: str = "acme") -> ToolScope:
    return ToolScope(tenant, "w", "run-1", Path("/nonexistent"), trust_level=trust_level, posture=posture)


class StatusLog:
    """The manager's on_status callback; tests wait on it instead of sleeping."""

    def __init__(self) -> None:
        self.seen: list[ComponentRuntimeStatus] = []
        self._changed: anyio.Event | None = None

    def __call__(self, status: ComponentRuntimeStatus) -> None:
        self.seen.append(status)
        if self._changed is not None:
            self._changed.set()

    async def wait_for(self, name: str, status: ComponentStatus) -> ComponentRuntimeStatus:
        with anyio.fail_after(WAIT):
            while True:
                for seen in reversed(self.seen):
                    if seen.name == name and seen.status is status:
                        return seen
                self._changed = anyio.Event()
                await self._changed.wait()


@asynccontextmanager
async def running(
    entries: list[dict[str, Any]], *, remote_allowed: bool = False, pipeline: ToolPipeline | None = None
) -> AsyncIterator[tuple[MCPManager, ToolPipeline, StatusLog]]:
    pipeline = pipeline or ToolPipeline()
    log = StatusLog()
    manager = MCPManager(pipeline, on_status=log)
    try:
        configs = parse_mcp_servers(entries, "PERSONA.md")
        await manager.start(configs, tenant_id="acme", worker_id="w", remote_allowed=remote_allowed)
        yield manager, pipeline, log
    finally:
        await manager.stop()


@asynccontextmanager
async def http_server(script: Path) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    async with await anyio.open_process([sys.executable, str(script), "http"], stderr=None) as process:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(WAIT):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        try:
            yield f"http://127.0.0.1:{int(line.split()[1])}/mcp", process
        finally:
            if process.returncode is None:
                process.kill()


def by_name(manager: MCPManager) -> dict[str, ComponentRuntimeStatus]:
    return {status.name: status for status in manager.statuses()}


async def call(pipeline: ToolPipeline, tool: str, /, trust_level: int = 2, **arguments: Any) -> ToolOutcome:
    return await pipeline.execute(scope(trust_level), ToolCall("call-1", tool, arguments))


def completed(outcome: ToolOutcome) -> tuple[str, bool, Any]:
    assert isinstance(outcome, ToolCompleted), outcome
    return outcome.result.content, outcome.result.is_error, outcome.result.data


def child_pids() -> set[int]:
    """Live children of this process (Linux /proc), zombies included."""
    found: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


async def test_time_server_tools_are_namespaced_undeclared_and_run_through_the_pipeline() -> None:
    async with running([TIME]) as (manager, pipeline, _):
        status = by_name(manager)["mcp:time"]
        assert (status.status, status.reason, status.backend) == (ComponentStatus.READY, "", "stdio")
        assert status.details["tools"] == ["time__convert_time", "time__get_current_time"]
        assert status.details["server"].startswith("mcp-time ")
        assert sorted(pipeline.names()) == ["time__convert_time", "time__get_current_time"]
        assert sorted(t.spec.name for t in manager.tools()) == sorted(pipeline.names())

        spec = pipeline.get("time__get_current_time").spec  # type: ignore[union-attr]
        assert (spec.effect, spec.risk_level, spec.source) == (None, RiskLevel.HIGH, "mcp:time")
        resolved = pipeline.resolved_spec(spec, scope())
        assert (resolved.effect, resolved.risk_level) == (Effect.EXTERNAL, RiskLevel.HIGH)

        denied = await call(pipeline, "time__get_current_time", trust_level=1, timezone="UTC")
        assert isinstance(denied, ToolDenied) and denied.code == "trust_level"

        text, is_error, data = completed(await call(pipeline, "time__get_current_time", timezone="UTC"))
        assert not is_error and data["timezone"] == "UTC" and '"timezone": "UTC"' in text
        assert data["datetime"].endswith("+00:00")

        text, is_error, _ = completed(await call(pipeline, "time__get_current_time", timezone="Nowhere/Land"))
        assert is_error and "Invalid timezone" in text

        invalid = await call(pipeline, "time__get_current_time", zone="UTC")
        assert isinstance(invalid, ToolFailed) and invalid.code == "invalid_arguments"


async def test_tool_effects_declare_what_a_server_tool_does() -> None:
    entry = {**TIME, "tool_effects": {"get_current_time": {"effect": "read"}, "convert_*": {"effect": "compute"}}}
    async with running([entry]) as (_, pipeline, _):
        specs = {spec.name: spec for spec in pipeline.visible(scope(trust_level=0, posture="proposal_only"))}
        assert specs["time__get_current_time"].effect is Effect.READ
        assert specs["time__convert_time"].effect is Effect.COMPUTE
        assert specs["time__convert_time"].risk_level is RiskLevel.LOW

        outcome = await call(
            pipeline, "time__convert_time", trust_level=0, source_timezone="UTC", time="12:00", target_timezone="UTC"
        )
        _, is_error, data = completed(outcome)
        assert not is_error and data["time_difference"] == "+0.0h"


async def test_trusted_annotations_turn_read_only_hints_into_read() -> None:
    async with running([{**TIME, "trust_annotations": True}]) as (_, pipeline, _):
        assert {pipeline.get(name).spec.effect for name in pipeline.names()} == {Effect.READ}  # type: ignore[union-attr]


async def test_a_name_taken_in_the_pipeline_is_skipped_and_reported() -> None:
    @function_tool(effect=Effect.READ, name="time__convert_time")
    async def taken() -> str:
        """Already here."""
        return "mine"

    async with running([TIME], pipeline=ToolPipeline([taken])) as (manager, pipeline, _):
        status = by_name(manager)["mcp:time"]
        assert status.details["tools"] == ["time__get_current_time"]
        assert status.details["skipped_tools"] == {"convert_time": "tool time__convert_time is already registered"}
        assert completed(await call(pipeline, "time__convert_time"))[0] == "mine"
    assert pipeline.names() == ["time__convert_time"]


async def test_servers_that_cannot_start_are_degraded_with_a_reason_and_no_tools() -> None:
    stderr_then_exit = "import sys; print('missing API key', file=sys.stderr); sys.exit(3)"
    entries: list[dict[str, Any]] = [
        {"name": "missing", "command": "/nonexistent/mcp-server"},
        {"name": "exits", "command": sys.executable, "args": ["-c", stderr_then_exit]},
        {
            "name": "mute",
            "command": sys.executable,
            "args": ["-c", "import sys; sys.stdin.read()"],
            "start_timeout": 0.5,
        },
    ]
    async with running(entries) as (manager, pipeline, _):
        statuses = by_name(manager)
        assert {s.status for s in statuses.values()} == {ComponentStatus.DEGRADED}
        assert statuses["mcp:missing"].reason == "cannot run '/nonexistent/mcp-server': No such file or directory"
        assert statuses["mcp:exits"].reason == "the server closed the connection; stderr: missing API key"
        assert statuses["mcp:mute"].reason == "no MCP handshake within 0.5s"
        assert pipeline.names() == [] and manager.tools() == []
        assert all("tools" not in s.details for s in statuses.values())


async def test_remote_servers_need_the_tenant_to_allow_them_and_disabled_ones_stay_off() -> None:
    entries: list[dict[str, Any]] = [
        {"name": "remote", "url": "http://127.0.0.1:9/mcp"},  # never contacted
        {**TIME, "enabled": False},
    ]
    async with running(entries, remote_allowed=False) as (manager, pipeline, _):
        statuses = by_name(manager)
        assert statuses["mcp:remote"].status is ComponentStatus.DISABLED
        assert statuses["mcp:remote"].details == {"tenant_id": "acme", "worker_id": "w"}
        assert statuses["mcp:remote"].reason == (
            "remote MCP servers are not allowed for tenant 'acme' (mcp_remote_allowed is false)"
        )
        assert (statuses["mcp:time"].status, statuses["mcp:time"].reason) == (
            ComponentStatus.DISABLED,
            "disabled in its configuration",
        )
        assert pipeline.names() == []


async def test_an_unreachable_remote_server_is_degraded() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        entry = {"name": "remote", "url": f"http://127.0.0.1:{closed.getsockname()[1]}/mcp"}
        async with running([entry], remote_allowed=True) as (manager, pipeline, _):
            status = by_name(manager)["mcp:remote"]
            assert (status.status, status.reason) == (
                ComponentStatus.DEGRADED,
                "ConnectError: All connection attempts failed",
            )
            assert pipeline.names() == []


async def test_streamable_http_server_sends_headers_and_is_degraded_once_it_dies(fixture_server: Path) -> None:
    async with http_server(fixture_server) as (url, process):
        entry = {"name": "web", "url": url, "headers": {"X-Api-Key": "k-123"}}
        async with running([entry], remote_allowed=True) as (manager, pipeline, _):
            status = by_name(manager)["mcp:web"]
            assert (status.status, status.backend) == (ComponentStatus.READY, "http")
            assert "web__header" in pipeline.names()
            assert completed(await call(pipeline, "web__header", name="x-api-key"))[:2] == ("k-123", False)
            assert completed(await call(pipeline, "web__fail"))[:2] == ("Error executing tool fail", True)

            process.kill()
            await process.wait()
            text, is_error, _ = completed(await call(pipeline, "web__echo", text="hi"))
            assert is_error and text == "MCP server 'web' closed the connection"
            status = by_name(manager)["mcp:web"]
            assert status.status is ComponentStatus.DEGRADED
            assert status.reason.startswith("connection lost during a call to 'echo'")
            assert pipeline.names() == [] and manager.tools() == []
            gone = await call(pipeline, "web__echo", text="hi")
            assert isinstance(gone, ToolDenied) and gone.code == "unknown_tool"


async def test_a_stdio_server_that_dies_later_is_degraded_and_its_tools_removed(fixture_server: Path) -> None:
    async with running([stdio_fixture(fixture_server)]) as (manager, pipeline, log):
        _, _, data = completed(await call(pipeline, "fx__pid"))
        os.kill(data["result"], signal.SIGKILL)
        status = await log.wait_for("mcp:fx", ComponentStatus.DEGRADED)
        assert status.reason == "the server closed the connection"
        assert pipeline.names() == [] and by_name(manager)["mcp:fx"].status is ComponentStatus.DEGRADED


async def test_a_crash_during_a_call_fails_that_call_and_degrades_the_server(fixture_server: Path) -> None:
    async with running([stdio_fixture(fixture_server), TIME]) as (manager, pipeline, log):
        text, is_error, _ = completed(await call(pipeline, "fx__crash"))
        assert is_error and text == "MCP server 'fx' closed the connection"
        assert by_name(manager)["mcp:fx"].status is ComponentStatus.DEGRADED
        assert sorted(pipeline.names()) == ["time__convert_time", "time__get_current_time"]
        final = await log.wait_for("mcp:fx", ComponentStatus.DEGRADED)
        assert final.reason.startswith("connection lost during a call to 'crash'"), final.reason


async def test_a_call_that_outlives_call_timeout_fails_and_the_server_stays_up(fixture_server: Path) -> None:
    async with running([stdio_fixture(fixture_server, call_timeout="300ms")]) as (manager, pipeline, _):
        outcome = await call(pipeline, "fx__hang")
        assert isinstance(outcome, ToolFailed) and outcome.code == "timeout"
        assert "fx__hang timed out after 0.3s" in outcome.error
        assert by_name(manager)["mcp:fx"].status is ComponentStatus.READY
        assert completed(await call(pipeline, "fx__echo", text="still here"))[:2] == ("still here", False)


async def test_stop_closes_every_server_and_leaves_no_child_process(fixture_server: Path) -> None:
    before = await anyio.to_thread.run_sync(child_pids)
    async with running([stdio_fixture(fixture_server), TIME]) as (manager, pipeline, log):
        _, _, data = completed(await call(pipeline, "fx__pid"))
        server_pid = data["result"]
        assert len(await anyio.to_thread.run_sync(child_pids) - before) == 2
        await manager.stop()
        assert manager.statuses() == [] and manager.tools() == [] and pipeline.names() == []
        assert {(s.name, s.status, s.reason) for s in log.seen[-2:]} == {
            ("mcp:fx", ComponentStatus.DISABLED, "stopped"),
            ("mcp:time", ComponentStatus.DISABLED, "stopped"),
        }
    assert await anyio.to_thread.run_sync(child_pids) == before
    with pytest.raises(ProcessLookupError):
        os.kill(server_pid, 0)
