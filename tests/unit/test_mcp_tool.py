"""MCP tools as genworker tools: names, declared effects, result mapping, call errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError
from mcp import types as mcp_types

from genworker.tools.base import Effect, RiskLevel, ToolCall
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.mcp import MCPUnavailableError
from genworker.tools.mcp.tool import build_tools, namespaced_name, to_tool_result, tool_effect
from genworker.workspace.models.mcp import MCPServerConfig

SCHEMA = {"type": "object", "properties": {}}


def server(**fields: Any) -> MCPServerConfig:
    return MCPServerConfig.model_validate({"name": "srv", "command": "x", **fields})


def remote_tool(name: str, read_only: bool | None = None, **fields: Any) -> mcp_types.Tool:
    annotations = mcp_types.ToolAnnotations(read_only_hint=read_only) if read_only is not None else None
    return mcp_types.Tool(name=name, input_schema=SCHEMA, annotations=annotations, **fields)


class FakeConnection:
    """Stands in for MCPConnection: returns a scripted result or raises a scripted error."""

    def __init__(self, config: MCPServerConfig, outcome: mcp_types.CallToolResult | Exception) -> None:
        self.config = config
        self.outcome = outcome
        self.calls: list[tuple[str, dict[str, Any], float]] = []

    async def call(self, name: str, arguments: dict[str, Any], *, read_timeout_s: float) -> mcp_types.CallToolResult:
        self.calls.append((name, arguments, read_timeout_s))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def context(tenant: str = "acme", worker: str = "w", timeout_s: float = 60.0) -> ToolContext:
    scope = ToolScope(tenant, worker, "run-1", Path("/nonexistent"))
    return ToolContext(scope, ToolCall("c1", "srv__echo"), build_spec_for("echo"), timeout_s=timeout_s)


def build_spec_for(name: str) -> Any:
    (tool,), _ = build_tools(FakeConnection(server(), text("")), [remote_tool(name)], tenant_id="acme", worker_id="w")
    return tool.spec


def text(value: str, is_error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(text=value)], is_error=is_error)


def test_names_are_namespaced_and_made_safe() -> None:
    assert namespaced_name("time", "get_current_time") == "time__get_current_time"
    assert namespaced_name("fs", "files.read/v2") == "fs__files_read_v2"
    assert namespaced_name("s", "t" * 61) == "s__" + "t" * 61
    assert namespaced_name("s", "t" * 62) is None


def test_unsafe_or_overlong_names_are_skipped_with_a_reason() -> None:
    tools, skipped = build_tools(
        FakeConnection(server(), text("")),
        [remote_tool("a.b"), remote_tool("a_b"), remote_tool("x" * 70)],
        tenant_id="acme",
        worker_id="w",
    )
    assert [t.spec.name for t in tools] == ["srv__a_b"]
    assert skipped == {
        "a_b": "its name 'srv__a_b' collides with tool 'a.b'",
        "x" * 70: f"'srv__{'x' * 70}' is longer than 64 characters",
    }


def test_undeclared_tools_stay_high_risk_even_when_the_server_says_read_only() -> None:
    (tool,), _ = build_tools(
        FakeConnection(server(), text("")),
        [remote_tool("look", read_only=True, description="Look.")],
        tenant_id="acme",
        worker_id="w",
    )
    spec = tool.spec
    assert (spec.effect, spec.declared, spec.risk_level, spec.requires_approval) == (None, False, RiskLevel.HIGH, False)
    assert (spec.source, spec.tags, spec.description) == ("mcp:srv", frozenset({"mcp"}), "Look.")
    assert spec.parameters == SCHEMA


def test_exact_tool_effect_beats_globs_which_apply_in_order() -> None:
    config = server(
        tool_effects={
            "get_*": {"effect": "compute"},
            "get_time": {"effect": "read"},
            "g*": {"effect": "write"},
        }
    )
    assert tool_effect(config, remote_tool("get_time")).effect is Effect.READ  # type: ignore[union-attr]
    assert tool_effect(config, remote_tool("get_zone")).effect is Effect.COMPUTE  # type: ignore[union-attr]
    assert tool_effect(config, remote_tool("go")).effect is Effect.WRITE  # type: ignore[union-attr]
    assert tool_effect(config, remote_tool("other")) is None


def test_read_only_hint_counts_only_when_annotations_are_trusted() -> None:
    trusted = server(trust_annotations=True)
    declared = tool_effect(trusted, remote_tool("look", read_only=True))
    assert declared is not None and (declared.effect, declared.risk) == (Effect.READ, RiskLevel.LOW)
    assert tool_effect(trusted, remote_tool("poke", read_only=False)) is None
    assert tool_effect(server(), remote_tool("look", read_only=True)) is None
    config = server(trust_annotations=True, tool_effects={"look": {"effect": "external"}})
    assert tool_effect(config, remote_tool("look", read_only=True)).effect is Effect.EXTERNAL  # type: ignore[union-attr]


def test_results_map_text_structured_and_other_blocks() -> None:
    assert to_tool_result(text("hi")).content == "hi"
    assert to_tool_result(text("bad", is_error=True)).is_error
    structured = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    assert (to_tool_result(structured).content, to_tool_result(structured).data) == ('{"n": 1}', {"n": 1})
    mixed = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="see"),
            mcp_types.ImageContent(data="AAAA", mime_type="image/png"),
            mcp_types.ResourceLink(name="doc", uri="file:///doc.txt"),
            mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents(uri="file:///a", text="inline")),
            mcp_types.EmbeddedResource(
                resource=mcp_types.BlobResourceContents(uri="file:///b", blob="AAAA", mime_type="application/pdf")
            ),
        ]
    )
    assert to_tool_result(mixed).content.splitlines() == [
        "see",
        "[image: image/png, 3 bytes]",
        "[resource link: doc <file:///doc.txt>]",
        "inline",
        "[resource: <file:///b> application/pdf]",
    ]


@pytest.mark.anyio
async def test_run_passes_arguments_and_the_tighter_timeout() -> None:
    connection = FakeConnection(server(call_timeout=5), text("pong"))
    (tool,), _ = build_tools(connection, [remote_tool("echo")], tenant_id="acme", worker_id="w")
    result = await tool.run(context(timeout_s=2), {"text": "ping"})
    assert (result.content, result.is_error) == ("pong", False)
    assert connection.calls == [("echo", {"text": "ping"}, 2)]


@pytest.mark.anyio
async def test_run_maps_call_failures() -> None:
    async def run(error: Exception) -> Any:
        (tool,), _ = build_tools(
            FakeConnection(server(), error), [remote_tool("echo")], tenant_id="acme", worker_id="w"
        )
        return await tool.run(context(), {})

    unavailable = await run(MCPUnavailableError("MCP server 'srv' is not connected: stopped"))
    assert (unavailable.content, unavailable.is_error) == ("MCP server 'srv' is not connected: stopped", True)
    invalid = await run(MCPError(mcp_types.INVALID_PARAMS, "Unknown tool: echo"))
    assert (invalid.content, invalid.is_error) == ("MCP error -32602: Unknown tool: echo", True)
    with pytest.raises(TimeoutError, match="srv__echo timed out after 60s"):
        await run(MCPError(mcp_types.REQUEST_TIMEOUT, "Request 'tools/call' timed out"))


@pytest.mark.anyio
async def test_a_worker_cannot_run_another_workers_server_tools() -> None:
    connection = FakeConnection(server(), text("secret"))
    (tool,), _ = build_tools(connection, [remote_tool("echo")], tenant_id="acme", worker_id="w")
    for ctx in (context(tenant="other"), context(worker="w2")):
        result = await tool.run(ctx, {})
        assert (result.content, result.is_error) == ("srv__echo is not available to this worker", True)
    assert connection.calls == []
