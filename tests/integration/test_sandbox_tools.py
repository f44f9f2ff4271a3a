"""bash_execute through a real ToolPipeline: results, scratch folder, timeouts, trust."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from genworker.tools.audit import MemoryAuditSink
from genworker.tools.base import Effect, RiskLevel, ToolCall, ToolResult
from genworker.tools.builtin.bash import bash_execute_tool
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolOutcome
from genworker.tools.pipeline import ToolPipeline

pytestmark = pytest.mark.anyio


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def pipeline(audit: MemoryAuditSink) -> ToolPipeline:
    return ToolPipeline([bash_execute_tool()], audit=audit)


@pytest.fixture
def scope(tmp_path: Path) -> ToolScope:
    return ToolScope("acme", "alice", "run-1", tmp_path / "alice", trust_level=2)


def completed(outcome: ToolOutcome) -> ToolResult:
    assert isinstance(outcome, ToolCompleted), outcome
    return outcome.result


async def bash(pipeline: ToolPipeline, scope: ToolScope, command: str, **arguments: object) -> ToolOutcome:
    return await pipeline.execute(scope, ToolCall("call-1", "bash_execute", {"command": command, **arguments}))


async def test_runs_a_command(pipeline: ToolPipeline, scope: ToolScope, audit: MemoryAuditSink) -> None:
    result = completed(await bash(pipeline, scope, "echo hello; echo oops >&2"))

    assert result.content == "hello\n[stderr]\noops"
    assert not result.is_error
    assert result.data["exit_code"] == 0
    assert [(r.tool, r.decision, r.outcome) for r in audit.records] == [("bash_execute", "allow", "completed")]


async def test_a_failing_command_is_an_error_result(pipeline: ToolPipeline, scope: ToolScope) -> None:
    result = completed(await bash(pipeline, scope, "echo partial; exit 3"))

    assert result.is_error
    assert result.content == "partial\n[exit code 3]"


async def test_works_in_the_runs_scratch_folder_across_calls(pipeline: ToolPipeline, scope: ToolScope) -> None:
    first = completed(await bash(pipeline, scope, "pwd; echo 42 > answer.txt"))
    second = completed(await bash(pipeline, scope, "cat answer.txt; echo more >> answer.txt"))

    scratch = scope.worker_dir / "runtime" / "scratch" / "run-1"
    assert first.content == str(scratch)
    assert second.content == "42" and not second.is_error
    assert await asyncio.to_thread((scratch / "answer.txt").read_text, encoding="utf-8") == "42\nmore\n"


async def test_timeout_argument_stops_the_command(pipeline: ToolPipeline, scope: ToolScope) -> None:
    result = completed(await bash(pipeline, scope, "sleep 300", timeout=0.5))

    assert result.is_error
    assert result.content == "[timed out (wall clock)]"
    assert result.data["timed_out"] is True


async def test_needs_trust_level_2(pipeline: ToolPipeline, scope: ToolScope, tmp_path: Path) -> None:
    low = ToolScope("acme", "alice", "run-1", scope.worker_dir, trust_level=1)

    outcome = await bash(pipeline, low, "echo should not run > ran.txt")

    assert isinstance(outcome, ToolDenied) and outcome.code == "trust_level"


async def test_refuses_low_trust_on_its_own(scope: ToolScope) -> None:
    """Defence in depth: called without the pipeline's permission check, the tool still refuses."""
    tool = bash_execute_tool()
    low = ToolScope("acme", "alice", "run-1", scope.worker_dir, trust_level=1)
    ctx = ToolContext(low, ToolCall("c", "bash_execute", {}), tool.spec)

    result = await tool.run(ctx, {"command": "echo ran > ran.txt"})

    assert result.is_error
    assert result.content == "bash_execute needs trust level 2; tenant acme has 1"
    assert not await asyncio.to_thread((scope.worker_dir / "runtime").exists)


def test_spec_declares_external_high_risk() -> None:
    spec = bash_execute_tool().spec

    assert (spec.name, spec.effect, spec.risk_level) == ("bash_execute", Effect.EXTERNAL, RiskLevel.HIGH)
    assert spec.parameters["required"] == ["command"]
    assert set(spec.parameters["properties"]) == {"command", "timeout"}
