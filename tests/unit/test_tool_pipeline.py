"""ToolPipeline: what a run sees, and every way a call can end."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.audit import MemoryAuditSink
from genworker.tools.base import HIDDEN_FROM_LLM, Effect, RiskLevel, ToolCall, ToolDefinitionError, ToolResult, ToolSpec
from genworker.tools.context import Posture, ToolContext, ToolScope
from genworker.tools.middlewares import CallNext
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.effects import EffectTable

pytestmark = pytest.mark.anyio

OBJECT = {"type": "object", "properties": {}, "additionalProperties": True}


@dataclass(frozen=True)
class StaticTool:
    """A tool built from a spec and a coroutine, like an MCP or script tool."""

    spec: ToolSpec
    fn: Callable[[ToolContext, Mapping[str, Any]], Awaitable[ToolResult]]

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        return await self.fn(ctx, arguments)


async def _echo(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
    return ToolResult(f"{ctx.spec.name} ran", data=dict(arguments))


def tool(
    name: str, effect: Effect | None, *, tags: frozenset[str] = frozenset(), approval: bool = False, fn: Any = None
) -> StaticTool:
    return StaticTool(
        ToolSpec(name, f"the {name} tool", OBJECT, effect, RiskLevel.LOW, approval, tags, "test"), fn or _echo
    )


@function_tool(effect=Effect.READ)
async def lookup(key: str, limit: int = 3, note: str | None = None) -> str:
    """Look something up.

    Args:
        key: What to look up.
        limit: How many results.
        note: An optional note.
    """
    return f"found {key} x{limit}"


def make_tools() -> list[StaticTool]:
    return [
        tool("reader", Effect.READ),
        tool("calculator", Effect.COMPUTE),
        tool("writer", Effect.WRITE),
        tool("mailer", Effect.EXTERNAL),
        tool("delegator", Effect.DELEGATE),
        tool("mystery", None),
        tool("secret_script", Effect.READ, tags=frozenset({HIDDEN_FROM_LLM})),
        tool("admin", Effect.READ, tags=frozenset({"requires_trust_3"})),
    ]


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def pipeline(audit: MemoryAuditSink) -> ToolPipeline:
    return ToolPipeline(make_tools(), audit=audit)


def scope(tmp_path: Path, **kw: Any) -> ToolScope:
    values: dict[str, Any] = {"trust_level": 3, **kw}
    return ToolScope("acme", "alice", "run-1", tmp_path, **values)


def names(specs: list[ToolSpec]) -> list[str]:
    return [s.name for s in specs]


# -- visible() ---------------------------------------------------------------------


def test_visible_normal_shows_all_but_hidden(pipeline: ToolPipeline, tmp_path: Path) -> None:
    shown = pipeline.visible(scope(tmp_path))
    assert names(shown) == ["reader", "calculator", "writer", "mailer", "delegator", "mystery", "admin"]
    mystery = next(s for s in shown if s.name == "mystery")
    assert (mystery.effect, mystery.risk_level) == (Effect.EXTERNAL, RiskLevel.HIGH)


@pytest.mark.parametrize("posture", ["proposal_only", "degraded"])
def test_visible_read_only_postures_show_only_read_and_compute(
    pipeline: ToolPipeline, tmp_path: Path, posture: Posture
) -> None:
    assert names(pipeline.visible(scope(tmp_path, posture=posture))) == ["reader", "calculator", "admin"]


def test_visible_gated_execute_is_not_restricted(pipeline: ToolPipeline, tmp_path: Path) -> None:
    assert "mailer" in names(pipeline.visible(scope(tmp_path, posture="gated_execute")))


def test_visible_undeclared_tool_shown_in_proposal_only_once_declared_read(
    pipeline: ToolPipeline, tmp_path: Path
) -> None:
    overrides = EffectTable.from_mapping({"myst*": {"effect": "read"}}, "TENANT.json")
    assert "mystery" in names(
        pipeline.visible(scope(tmp_path, posture="proposal_only", tenant_effect_overrides=overrides))
    )


@pytest.mark.parametrize(
    ("trust", "expected"),
    [
        (0, ["reader", "calculator"]),
        (1, ["reader", "calculator", "writer"]),
        (2, ["reader", "calculator", "writer", "mailer", "delegator", "mystery"]),
        (3, ["reader", "calculator", "writer", "mailer", "delegator", "mystery", "admin"]),
    ],
)
def test_visible_by_trust_level(pipeline: ToolPipeline, tmp_path: Path, trust: int, expected: list[str]) -> None:
    assert names(pipeline.visible(scope(tmp_path, trust_level=trust))) == expected


def test_visible_policy_lists(pipeline: ToolPipeline, tmp_path: Path) -> None:
    tenant = scope(tmp_path, tenant_denied_tools=frozenset({"mailer", "del*"}))
    assert {"mailer", "delegator"}.isdisjoint(names(pipeline.visible(tenant)))
    blacklist = scope(tmp_path, worker_denied_tools=frozenset({"writer"}))
    assert "writer" not in names(pipeline.visible(blacklist))
    whitelist = scope(tmp_path, worker_allowed_tools=frozenset({"reader", "writer", "secret_script"}))
    assert names(pipeline.visible(whitelist)) == ["reader", "writer"]
    both = scope(
        tmp_path, worker_allowed_tools=frozenset({"reader", "writer"}), worker_denied_tools=frozenset({"writer"})
    )
    assert names(pipeline.visible(both)) == ["reader"]


# -- execute(): refusals -----------------------------------------------------------


async def test_unknown_tool(pipeline: ToolPipeline, audit: MemoryAuditSink, tmp_path: Path) -> None:
    outcome = await pipeline.execute(scope(tmp_path), ToolCall("c1", "nope", {"x": 1}))
    assert outcome == ToolDenied("unknown_tool", "there is no tool named 'nope'")
    [record] = audit.records
    assert (record.tool, record.decision, record.outcome, record.code) == ("nope", "deny", "denied", "unknown_tool")


async def test_hidden_tool_is_unknown_to_the_llm_but_runs_for_code(pipeline: ToolPipeline, tmp_path: Path) -> None:
    call = ToolCall("c1", "secret_script")
    assert isinstance(await pipeline.execute(scope(tmp_path), call), ToolDenied)
    assert isinstance(await pipeline.execute(scope(tmp_path), call, caller="workflow"), ToolCompleted)


@pytest.mark.parametrize(
    ("kw", "name", "code"),
    [
        ({"tenant_denied_tools": frozenset({"mailer"})}, "mailer", "denied_by_tenant"),
        ({"tenant_denied_tools": frozenset({"mail*"})}, "mailer", "denied_by_tenant"),
        ({"worker_denied_tools": frozenset({"writer"})}, "writer", "denied_by_worker"),
        ({"worker_allowed_tools": frozenset({"reader"})}, "writer", "denied_by_worker"),
        ({"trust_level": 0}, "writer", "trust_level"),
        ({"trust_level": 1}, "mailer", "trust_level"),
        ({"trust_level": 1}, "mystery", "trust_level"),
        ({"trust_level": 1}, "delegator", "trust_level"),
        ({"trust_level": 2}, "admin", "trust_level"),
    ],
)
async def test_policy_denials(pipeline: ToolPipeline, tmp_path: Path, kw: dict[str, Any], name: str, code: str) -> None:
    outcome = await pipeline.execute(scope(tmp_path, **kw), ToolCall("c1", name))
    assert isinstance(outcome, ToolDenied)
    assert outcome.code == code
    assert name in outcome.reason


async def test_whitelist_allows_listed_tool(pipeline: ToolPipeline, tmp_path: Path) -> None:
    outcome = await pipeline.execute(
        scope(tmp_path, worker_allowed_tools=frozenset({"writer"})), ToolCall("c", "writer")
    )
    assert isinstance(outcome, ToolCompleted)


async def test_posture_checked_again_at_call_time(pipeline: ToolPipeline, tmp_path: Path) -> None:
    run = scope(tmp_path, posture="proposal_only")
    shown = names(pipeline.visible(run))
    pipeline.register(tool("late_sender", None))  # e.g. an MCP server connected mid-run
    pipeline.register(tool("late_writer", Effect.WRITE))
    assert "late_sender" not in shown
    for name in ("late_sender", "late_writer", "mailer"):
        outcome = await pipeline.execute(run, ToolCall("c", name))
        assert isinstance(outcome, ToolDenied)
        assert outcome.code == "posture"
    assert isinstance(await pipeline.execute(run, ToolCall("c", "reader")), ToolCompleted)


# -- execute(): arguments ----------------------------------------------------------


async def test_invalid_arguments_name_the_field(tmp_path: Path) -> None:
    pipeline = ToolPipeline([lookup])
    run = scope(tmp_path)
    wrong_type = await pipeline.execute(run, ToolCall("c", "lookup", {"key": "k", "limit": "many"}))
    assert wrong_type == ToolFailed(
        "invalid_arguments", "invalid arguments for lookup: limit: 'many' is not of type 'integer'"
    )
    missing = await pipeline.execute(run, ToolCall("c", "lookup", {}))
    assert isinstance(missing, ToolFailed)
    assert "'key' is a required property" in missing.error
    extra = await pipeline.execute(run, ToolCall("c", "lookup", {"key": "k", "colour": "red"}))
    assert isinstance(extra, ToolFailed)
    assert "'colour' was unexpected" in extra.error


async def test_valid_arguments_run_and_null_is_allowed_for_optional(tmp_path: Path) -> None:
    pipeline = ToolPipeline([lookup])
    outcome = await pipeline.execute(scope(tmp_path), ToolCall("c", "lookup", {"key": "k", "note": None}))
    assert outcome == ToolCompleted(ToolResult("found k x3", data="found k x3"))


def test_register_rejects_duplicates_and_broken_schemas(pipeline: ToolPipeline) -> None:
    with pytest.raises(ToolDefinitionError, match="already registered"):
        pipeline.register(tool("reader", Effect.READ))
    broken = StaticTool(ToolSpec("broken", "", {"type": "nonsense"}, Effect.READ), _echo)
    with pytest.raises(ToolDefinitionError, match="broken: invalid parameters schema"):
        pipeline.register(broken)
    assert pipeline.get("broken") is None


async def test_unregistered_tool_becomes_unknown(pipeline: ToolPipeline, tmp_path: Path) -> None:
    assert pipeline.unregister("reader") is not None
    assert pipeline.unregister("reader") is None
    outcome = await pipeline.execute(scope(tmp_path), ToolCall("c", "reader"))
    assert isinstance(outcome, ToolDenied)
    assert outcome.code == "unknown_tool"


# -- execute(): running ------------------------------------------------------------


async def test_timeout(tmp_path: Path) -> None:
    never = asyncio.Event()

    async def hang(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        await never.wait()
        raise AssertionError("unreachable")

    pipeline = ToolPipeline([tool("hang", Effect.READ, fn=hang)])
    outcome = await pipeline.execute(scope(tmp_path, default_timeout_s=0.01), ToolCall("c", "hang"))
    assert outcome == ToolFailed("timeout", "tool hang did not finish within 0.01s")


async def test_exceptions_become_tool_failed(tmp_path: Path, audit: MemoryAuditSink) -> None:
    async def boom(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        raise RuntimeError("disk on fire")

    async def wrong(ctx: ToolContext, arguments: Mapping[str, Any]) -> Any:
        return "not a ToolResult"

    pipeline = ToolPipeline([tool("boom", Effect.READ, fn=boom), tool("wrong", Effect.READ, fn=wrong)], audit=audit)
    assert await pipeline.execute(scope(tmp_path), ToolCall("c", "boom")) == ToolFailed(
        "error", "RuntimeError: disk on fire"
    )
    assert await pipeline.execute(scope(tmp_path), ToolCall("c", "wrong")) == ToolFailed(
        "error", "tool wrong returned str, not a ToolResult"
    )
    assert [(r.decision, r.outcome, r.code) for r in audit.records] == [("allow", "failed", "error")] * 2


async def test_approval_required_then_approved(tmp_path: Path, audit: MemoryAuditSink) -> None:
    ran: list[str] = []

    async def send(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        ran.append(ctx.call.id)
        return ToolResult("sent")

    pipeline = ToolPipeline([tool("send", Effect.EXTERNAL, approval=True, fn=send)], audit=audit)
    asked = await pipeline.execute(scope(tmp_path), ToolCall("call-7", "send"))
    assert isinstance(asked, ToolNeedsApproval)
    assert "call-7" in asked.reason
    assert ran == []
    other = await pipeline.execute(scope(tmp_path, approved_call_ids=frozenset({"call-8"})), ToolCall("call-7", "send"))
    assert isinstance(other, ToolNeedsApproval)
    approved = scope(tmp_path, approved_call_ids=frozenset({"call-7"}))
    assert await pipeline.execute(approved, ToolCall("call-7", "send")) == ToolCompleted(ToolResult("sent"))
    assert ran == ["call-7"]
    assert [(r.decision, r.approved) for r in audit.records] == [("ask", False), ("ask", False), ("allow", True)]


async def test_approval_from_overrides(pipeline: ToolPipeline, tmp_path: Path) -> None:
    overrides = EffectTable.from_mapping({"writer": {"requires_approval": True}}, "PERSONA.md")
    outcome = await pipeline.execute(scope(tmp_path, worker_effect_overrides=overrides), ToolCall("c", "writer"))
    assert isinstance(outcome, ToolNeedsApproval)


async def test_approval_is_not_asked_for_denied_or_invalid_calls(tmp_path: Path) -> None:
    pipeline = ToolPipeline([replace(lookup, spec=replace(lookup.spec, requires_approval=True))])
    denied = await pipeline.execute(scope(tmp_path, worker_denied_tools=frozenset({"lookup"})), ToolCall("c", "lookup"))
    assert isinstance(denied, ToolDenied)
    invalid = await pipeline.execute(scope(tmp_path), ToolCall("c", "lookup", {}))
    assert isinstance(invalid, ToolFailed)


# -- hooks and middlewares ---------------------------------------------------------


async def test_hooks_run_first_and_can_deny(tmp_path: Path) -> None:
    seen: list[str] = []

    async def log_hook(ctx: ToolContext) -> ToolDenied | None:
        seen.append(ctx.spec.name)
        return None

    async def no_mail(ctx: ToolContext) -> ToolDenied | None:
        return ToolDenied("hook", "no mail on Sundays") if ctx.spec.name == "mailer" else None

    async def broken(ctx: ToolContext) -> ToolDenied | None:
        raise ValueError("hook bug")

    pipeline = ToolPipeline(make_tools(), hooks=[log_hook, no_mail])
    # the hook sees the call even when the posture check (after it) refuses it
    posture = await pipeline.execute(scope(tmp_path, posture="degraded"), ToolCall("c", "writer"))
    assert isinstance(posture, ToolDenied)
    assert posture.code == "posture"
    assert await pipeline.execute(scope(tmp_path), ToolCall("c", "mailer")) == ToolDenied("hook", "no mail on Sundays")
    assert seen == ["writer", "mailer"]
    failing = ToolPipeline(make_tools(), hooks=[broken])
    assert await failing.execute(scope(tmp_path), ToolCall("c", "reader")) == ToolDenied(
        "hook", "a pre-call check failed: ValueError: hook bug"
    )


async def test_extra_middlewares_run_outermost_first_and_pass_new_contexts(tmp_path: Path) -> None:
    order: list[str] = []
    received: list[ToolContext] = []

    def recording(label: str) -> Callable[[ToolContext, CallNext], Awaitable[ToolOutcome]]:
        async def middleware(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
            order.append(f"{label}>")
            outcome = await call_next(ctx)
            order.append(f"<{label}")
            return outcome

        return middleware

    async def add_default(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        received.append(ctx)
        arguments = {"limit": 9, **ctx.call.arguments}
        return await call_next(replace(ctx, call=replace(ctx.call, arguments=arguments)))

    pipeline = ToolPipeline([lookup], middlewares=[recording("a"), add_default, recording("b")])
    call = ToolCall("c", "lookup", {"key": "k"})
    outcome = await pipeline.execute(scope(tmp_path), call)
    assert outcome == ToolCompleted(ToolResult("found k x9", data="found k x9"))
    assert order == ["a>", "b>", "<b", "<a"]
    assert call.arguments == {"key": "k"}
    assert received[0].call is call


async def test_middleware_can_tighten_the_timeout(tmp_path: Path) -> None:
    never = asyncio.Event()

    async def hang(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        await never.wait()
        raise AssertionError("unreachable")

    async def short(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        return await call_next(replace(ctx, timeout_s=0.01))

    pipeline = ToolPipeline([tool("hang", Effect.READ, fn=hang)], middlewares=[short])
    outcome = await pipeline.execute(scope(tmp_path, default_timeout_s=3600), ToolCall("c", "hang"))
    assert isinstance(outcome, ToolFailed)
    assert outcome.code == "timeout"


async def test_extra_middlewares_only_see_permitted_calls(tmp_path: Path) -> None:
    seen: list[str] = []

    async def spy(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
        seen.append(ctx.spec.name)
        return await call_next(ctx)

    pipeline = ToolPipeline(make_tools(), middlewares=[spy])
    await pipeline.execute(scope(tmp_path, trust_level=0), ToolCall("c", "mailer"))
    await pipeline.execute(scope(tmp_path), ToolCall("c", "reader"))
    assert seen == ["reader"]


# -- audit and redaction -----------------------------------------------------------

SECRET = "test-fake-secret-value"


async def test_one_audit_record_per_call_with_secrets_redacted(tmp_path: Path, audit: MemoryAuditSink) -> None:
    async def leak(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        return ToolResult(f"db password is {SECRET}; key sk-abcdefghijklmnopqrstuv", data={"pw": SECRET})

    pipeline = ToolPipeline([tool("leak", Effect.READ, fn=leak), *make_tools()], audit=audit)
    run = scope(tmp_path, secrets=(SECRET,), posture="proposal_only")
    args = {"query": f"use {SECRET}", "api_key": "plain-looking", "header": "Authorization: Bearer abcdef123456"}
    outcome = await pipeline.execute(run, ToolCall("c1", "leak", args), caller="workflow")
    await pipeline.execute(run, ToolCall("c2", "writer"))
    assert outcome == ToolCompleted(ToolResult("db password is [REDACTED]; key [REDACTED]", data={"pw": "[REDACTED]"}))
    first, second = audit.records
    assert first.args == {
        "query": "use [REDACTED]",
        "api_key": "[REDACTED]",
        "header": "Authorization: Bearer [REDACTED]",
    }
    assert (first.tenant_id, first.worker_id, first.run_id, first.call_id) == ("acme", "alice", "run-1", "c1")
    assert (first.tool, first.caller, first.effect, first.risk_level) == ("leak", "workflow", "read", "low")
    assert (first.decision, first.outcome, first.code, first.detail) == ("allow", "completed", None, "")
    assert first.duration_ms >= 0
    assert first.ts.endswith("+00:00")
    assert (second.decision, second.outcome, second.code) == ("deny", "denied", "posture")
    assert SECRET not in repr([r.as_dict() for r in audit.records])


async def test_error_messages_are_redacted(tmp_path: Path, audit: MemoryAuditSink) -> None:
    async def boom(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        raise RuntimeError(f"login failed for token xoxb-1234567890-abcdef and {SECRET}")

    pipeline = ToolPipeline([tool("boom", Effect.READ, fn=boom)], audit=audit)
    outcome = await pipeline.execute(scope(tmp_path, secrets=(SECRET,)), ToolCall("c", "boom"))
    assert outcome == ToolFailed("error", "RuntimeError: login failed for token [REDACTED] and [REDACTED]")
    assert audit.records[0].detail == outcome.error


async def test_cancelled_call_is_audited(tmp_path: Path, audit: MemoryAuditSink) -> None:
    started, never = asyncio.Event(), asyncio.Event()

    async def hang(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        started.set()
        await never.wait()
        raise AssertionError("unreachable")

    pipeline = ToolPipeline([tool("hang", Effect.READ, fn=hang)], audit=audit)
    task = asyncio.create_task(pipeline.execute(scope(tmp_path), ToolCall("c", "hang")))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [(r.decision, r.outcome) for r in audit.records] == [("cancelled", "cancelled")]


async def test_failing_audit_sink_does_not_break_the_call(tmp_path: Path) -> None:
    class BrokenSink:
        async def write(self, record: Any) -> None:
            raise OSError("disk full")

    pipeline = ToolPipeline(make_tools(), audit=BrokenSink())
    assert isinstance(await pipeline.execute(scope(tmp_path), ToolCall("c", "reader")), ToolCompleted)


async def test_a_tool_told_no_logs_one_line_and_a_buggy_tool_its_traceback(
    tmp_path: Path, audit: MemoryAuditSink, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused input or a missing file is the model's to handle: one INFO line, secrets masked.
    Any other exception looks like a bug in the tool: a WARNING with its traceback."""

    async def missing(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        raise FileNotFoundError(f"no such file: {SECRET}.md")

    async def buggy(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        return None.content  # type: ignore[attr-defined,no-any-return]

    pipeline = ToolPipeline(
        [tool("missing", Effect.READ, fn=missing), tool("buggy", Effect.READ, fn=buggy)], audit=audit
    )
    caplog.set_level("INFO", logger="genworker.tools")
    await pipeline.execute(scope(tmp_path, secrets=(SECRET,)), ToolCall("c1", "missing"))
    await pipeline.execute(scope(tmp_path), ToolCall("c2", "buggy"))
    told_no, bug = [r for r in caplog.records if r.name == "genworker.tools"]
    assert told_no.levelname == "INFO" and not told_no.exc_info
    assert told_no.getMessage() == "tool missing failed: FileNotFoundError: no such file: [REDACTED].md"
    assert bug.levelname == "WARNING" and bug.exc_info is not None and bug.exc_info[0] is AttributeError
