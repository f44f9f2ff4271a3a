"""bash_execute and execute_code through a real ToolPipeline: results, scratch folder, timeouts, trust.

Each test runs under plain asyncio and under uvloop (the loop `genworker run` serves on), with the
host configured for bubblewrap and for rlimits only (as root: the uid drop without bwrap).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvloop

from genworker.tools.audit import MemoryAuditSink
from genworker.tools.base import Effect, RiskLevel, ToolCall, ToolResult
from genworker.tools.builtin.bash import bash_execute_tool
from genworker.tools.builtin.execute_code import execute_code_tool
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.sandbox import IsolationChoice, SandboxHost, configure_sandbox, sandbox_status

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    if request.param == "uvloop":
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return "asyncio"


@pytest.fixture
def host() -> Iterator[Callable[[IsolationChoice], None]]:
    """Configure the process-wide sandbox host for the test; the default comes back afterwards."""
    yield lambda isolation: configure_sandbox(SandboxHost(isolation=isolation))
    configure_sandbox(SandboxHost())


@pytest.fixture(params=["rlimits", "bwrap"])
def isolation(request: pytest.FixtureRequest, host: Callable[[IsolationChoice], None]) -> IsolationChoice:
    choice: IsolationChoice = request.param
    if choice == "bwrap" and sandbox_status()["isolation"] != "bwrap":
        pytest.skip(f"bubblewrap not usable here: {sandbox_status()['reason']}")
    host(choice)
    return choice


@pytest.fixture
def audit() -> MemoryAuditSink:
    return MemoryAuditSink()


@pytest.fixture
def pipeline(audit: MemoryAuditSink, isolation: IsolationChoice) -> ToolPipeline:
    pipeline: ToolPipeline
    pipeline = ToolPipeline([bash_execute_tool(), execute_code_tool(lambda: pipeline)], audit=audit)
    return pipeline


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


async def test_execute_code_runs_python(pipeline: ToolPipeline, scope: ToolScope) -> None:
    code = "import os\nprint(6 * 7, os.getcwd())"
    outcome = await pipeline.execute(scope, ToolCall("call-2", "execute_code", {"code": code}))

    result = completed(outcome)
    assert result.content == f"42 {scope.worker_dir / 'runtime' / 'scratch' / 'run-1'}"
    assert not result.is_error


@pytest.mark.parametrize("tool, arguments", [("bash_execute", {"command": "true"}), ("execute_code", {"code": "1"})])
async def test_a_sandbox_that_cannot_start_is_a_tool_error_and_a_warning(
    host: Callable[[IsolationChoice], None],
    scope: ToolScope,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tool: str,
    arguments: dict[str, str],
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap to find
    host("bwrap")  # required, so no call may start
    pipeline: ToolPipeline
    pipeline = ToolPipeline([bash_execute_tool(), execute_code_tool(lambda: pipeline)])

    result = completed(await pipeline.execute(scope, ToolCall("call-3", tool, arguments)))

    reason = "bubblewrap isolation required but unavailable: bwrap is not installed"
    assert result.is_error
    assert result.content == f"{tool} could not start: {reason}"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "genworker.sandbox"]
    assert [reason in r.getMessage() for r in warnings] == [True]


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
