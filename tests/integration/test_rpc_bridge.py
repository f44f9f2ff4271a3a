"""execute_code and the RPC bridge with a real ToolPipeline, real sandboxed processes and real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from genworker.tools.audit import MemoryAuditSink
from genworker.tools.base import HIDDEN_FROM_LLM, Effect, ToolCall, ToolResult
from genworker.tools.builtin.execute_code import execute_code_tool
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.rpc_bridge import MAX_REJECTED, RpcBridge
from genworker.tools.tool import function_tool

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """Plain asyncio, and uvloop: the loop `genworker run` serves on."""
    if request.param == "uvloop":
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return "asyncio"


MAILS: list[str] = []


@function_tool(effect=Effect.READ)
async def add(a: int, b: int) -> str:
    """Add two numbers.

    Args:
        a: The first.
        b: The second.
    """
    return str(a + b)


@function_tool(effect=Effect.EXTERNAL)
async def send_mail(to: str) -> str:
    """Send a mail.

    Args:
        to: The recipient.
    """
    MAILS.append(to)
    return "sent"


@function_tool(effect=Effect.WRITE, requires_approval=True)
async def publish(text: str) -> str:
    """Publish a text.

    Args:
        text: What to publish.
    """
    return "published"


@function_tool(effect=Effect.READ, tags=frozenset({HIDDEN_FROM_LLM}))
async def internal_lookup(key: str) -> str:
    """Look up an internal value.

    Args:
        key: The key.
    """
    return f"value-of-{key}"


@pytest.fixture(autouse=True)
def no_mails() -> None:
    MAILS.clear()


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


def make_pipeline(audit: MemoryAuditSink, max_calls: int = 50) -> ToolPipeline:
    pipeline: ToolPipeline
    execute_code = execute_code_tool(lambda: pipeline, max_calls=max_calls)
    pipeline = ToolPipeline([add, send_mail, publish, internal_lookup, execute_code], audit=audit)
    return pipeline


@pytest.fixture
def pipeline(audit: MemoryAuditSink) -> ToolPipeline:
    return make_pipeline(audit)


@pytest.fixture
def scope(tmp_path: Path) -> ToolScope:
    return ToolScope(
        "acme", "alice", "run-1", tmp_path / "alice", trust_level=2, tenant_denied_tools=frozenset({"send_mail"})
    )


def completed(outcome: ToolOutcome) -> ToolResult:
    assert isinstance(outcome, ToolCompleted), outcome
    return outcome.result


async def run_code(pipeline: ToolPipeline, scope: ToolScope, code: str) -> ToolResult:
    return completed(await pipeline.execute(scope, ToolCall("call-7", "execute_code", {"code": code})))


async def test_code_calls_a_tool_through_the_pipeline(
    pipeline: ToolPipeline, scope: ToolScope, audit: MemoryAuditSink
) -> None:
    result = await run_code(pipeline, scope, "print(tools.call('add', a=2, b=3))")

    assert result.content == "5" and not result.is_error
    nested = [r for r in audit.records if r.tool == "add"]
    assert [(r.caller, r.call_id, r.run_id, r.outcome) for r in nested] == [
        ("script", "call-7.rpc1", "run-1", "completed")
    ]


async def test_policy_applies_to_calls_from_code(pipeline: ToolPipeline, scope: ToolScope) -> None:
    code = """
for name, arguments in [("send_mail", {"to": "boss"}), ("publish", {"text": "hi"}),
                        ("no_such_tool", {}), ("add", {"a": "two", "b": 3})]:
    try:
        tools.call(name, **arguments)
    except tools.ToolError as exc:
        print(name, exc.kind, exc.code)
"""
    result = await run_code(pipeline, scope, code)

    assert result.content.splitlines() == [
        "send_mail denied denied_by_tenant",
        "publish approval_required approval",
        "no_such_tool denied unknown_tool",
        "add failed invalid_arguments",
    ]
    assert MAILS == []


async def test_hidden_tools_are_callable_from_code(pipeline: ToolPipeline, scope: ToolScope) -> None:
    result = await run_code(pipeline, scope, "print(tools.call('internal_lookup', key='k'))")

    assert result.content == "value-of-k"
    assert "internal_lookup" not in [spec.name for spec in pipeline.visible(scope)]


async def test_calls_per_run_are_limited(audit: MemoryAuditSink, scope: ToolScope) -> None:
    pipeline = make_pipeline(audit, max_calls=2)
    code = """
for i in range(3):
    try:
        print(tools.call('add', a=i, b=i))
    except tools.ToolError as exc:
        print(exc.kind, exc.code)
"""
    result = await run_code(pipeline, scope, code)

    assert result.content.splitlines() == ["0", "2", "limit too_many_calls"]


async def test_errors_in_the_code_come_back(pipeline: ToolPipeline, scope: ToolScope) -> None:
    result = await run_code(pipeline, scope, "print('before')\nraise ValueError('broken')")

    assert result.is_error
    assert result.content.startswith("before\n[stderr]\nTraceback")
    assert "ValueError: broken" in result.content
    assert result.content.endswith("[exit code 1]")


async def test_scripts_cannot_nest_without_end(pipeline: ToolPipeline, scope: ToolScope) -> None:
    inner = "print(tools.call('execute_code', code='print(1)'))"
    code = f"print(tools.call('execute_code', code={inner!r}))"

    result = await run_code(pipeline, scope, code)

    assert result.is_error
    assert "scripts may nest at most 2 deep" in result.content


async def test_needs_trust_level_2(pipeline: ToolPipeline, scope: ToolScope) -> None:
    low = ToolScope("acme", "alice", "run-1", scope.worker_dir, trust_level=1)

    outcome = await pipeline.execute(low, ToolCall("c", "execute_code", {"code": "print(1)"}))

    assert isinstance(outcome, ToolDenied) and outcome.code == "trust_level"
    tool = pipeline.get("execute_code")
    assert tool is not None
    refused = await tool.run(ToolContext(low, ToolCall("c", "execute_code", {}), tool.spec), {"code": "print(1)"})
    assert refused.is_error and "needs trust level 2" in refused.content


# --- the bridge protocol, spoken directly -------------------------------------------------------


@pytest.fixture
async def bridge(pipeline: ToolPipeline, scope: ToolScope) -> AsyncIterator[RpcBridge]:
    async with RpcBridge(pipeline, scope, call_id="direct", max_calls=5) as opened:
        yield opened


class Child:
    """The child's end of the bridge, as a sandboxed process would hold it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def of(cls, bridge: RpcBridge) -> Child:
        sock = socket.socket(fileno=os.dup(bridge.child_fd))
        return cls(*await asyncio.open_unix_connection(sock=sock))

    async def ask(self, message: dict[str, Any] | bytes) -> dict[str, Any] | None:
        self.writer.write(message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n")
        await self.writer.drain()
        line = await asyncio.wait_for(self.reader.readline(), 10)
        return json.loads(line) if line else None

    async def closed_by_bridge(self) -> bool:
        return await asyncio.wait_for(self.reader.read(), 10) == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def request(token: str, tool: str = "send_mail", **arguments: Any) -> dict[str, Any]:
    return {"v": 1, "id": 1, "token": token, "tool": tool, "arguments": arguments or {"to": "x"}}


async def test_a_wrong_token_is_rejected_and_the_channel_closed(bridge: RpcBridge, scope: ToolScope) -> None:
    child = await Child.of(bridge)

    reply = await child.ask(request("not-the-token"))

    assert reply == {
        "id": 1,
        "ok": False,
        "kind": "auth",
        "code": "bad_token",
        "error": "wrong or missing bridge token; closing",
    }
    assert await child.closed_by_bridge()
    assert (bridge.calls, bridge.rejected, MAILS) == (0, 1, [])
    await child.close()


async def test_malformed_requests_get_protocol_errors(bridge: RpcBridge) -> None:
    child = await Child.of(bridge)
    token = bridge.child_env()["GENWORKER_RPC_TOKEN"]

    not_json = await child.ask(b"{nope\n")
    not_object = await child.ask(b"[1, 2]\n")
    no_tool = await child.ask({"token": token, "id": 2, "arguments": {}})
    future = await child.ask({"v": 2, "token": token, "id": 4, "tool": "add", "arguments": {"a": 1, "b": 2}})
    good = await child.ask({"token": token, "id": 3, "tool": "add", "arguments": {"a": 1, "b": 2}})

    assert not_json is not None and (not_json["kind"], not_json["code"]) == ("protocol", "bad_json")
    assert not_object is not None and not_object["code"] == "bad_request"
    assert no_tool is not None and (no_tool["id"], no_tool["code"]) == (2, "bad_request")
    assert future is not None and (future["id"], future["code"]) == (4, "bad_version")
    assert good == {"id": 3, "ok": True, "content": "3"}
    await child.close()


async def test_the_bridge_hangs_up_on_a_flood_of_bad_requests(bridge: RpcBridge) -> None:
    child = await Child.of(bridge)

    replies = [await child.ask(b"garbage\n") for _ in range(MAX_REJECTED)]

    assert all(reply is not None and reply["code"] == "bad_json" for reply in replies)
    assert await child.closed_by_bridge()
    await child.close()


async def test_the_channel_closes_with_the_bridge(pipeline: ToolPipeline, scope: ToolScope) -> None:
    async with RpcBridge(pipeline, scope, call_id="short") as bridge:
        child = await Child.of(bridge)
        token = bridge.child_env()["GENWORKER_RPC_TOKEN"]
        assert await child.ask(request(token, "add", a=1, b=1)) == {"id": 1, "ok": True, "content": "2"}

    assert await child.closed_by_bridge()
    await child.close()
