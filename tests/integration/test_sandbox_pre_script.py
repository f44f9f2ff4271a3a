"""Pre-scripts (L2): run once in the sandbox, stdout returned, failures raised as PreScriptError."""

from __future__ import annotations

from pathlib import Path

import pytest

from genworker.tools.base import Effect
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.pre_script import PreScriptError, run_pre_script
from genworker.tools.tool import function_tool
from genworker.workspace.models.duty import PreScript

pytestmark = pytest.mark.anyio


@function_tool(effect=Effect.READ)
async def metric(name: str) -> str:
    """Read a metric.

    Args:
        name: The metric.
    """
    return f"{name}=17"


@pytest.fixture
def scope(tmp_path: Path) -> ToolScope:
    worker = tmp_path / "alice"
    (worker / "scripts").mkdir(parents=True)
    (worker / "scripts" / "collect.sh").write_text('echo "collected in $(basename "$PWD")"\n', encoding="utf-8")
    (tmp_path / "outside.sh").write_text("echo outside\n", encoding="utf-8")
    return ToolScope("acme", "alice", "run-9", worker, trust_level=2)


async def test_inline_python_stdout_is_returned(scope: ToolScope) -> None:
    text = await run_pre_script(PreScript(inline="print('open tickets: 3')"), scope, None)

    assert text == "open tickets: 3\n"


async def test_a_script_file_in_the_worker_folder(scope: ToolScope) -> None:
    text = await run_pre_script(PreScript(path="scripts/collect.sh", language="bash"), scope, None)

    assert text == "collected in run-9\n"


async def test_tools_are_called_through_the_pipeline(scope: ToolScope) -> None:
    pipeline = ToolPipeline([metric])
    pre_script = PreScript(inline="print('context:', tools.call('metric', name='signups'))")

    assert await run_pre_script(pre_script, scope, pipeline) == "context: signups=17\n"


async def test_without_a_pipeline_tool_calls_fail_clearly(scope: ToolScope) -> None:
    with pytest.raises(PreScriptError) as raised:
        await run_pre_script(PreScript(inline="tools.call('metric', name='x')"), scope, None)

    assert "no tool bridge in this sandbox" in str(raised.value)


async def test_failure_raises_with_the_result(scope: ToolScope) -> None:
    pre_script = PreScript(inline="echo partial; echo 'db unreachable' >&2; exit 3", language="bash")

    with pytest.raises(PreScriptError) as raised:
        await run_pre_script(pre_script, scope, None)

    assert str(raised.value) == "inline pre_script failed: exit code 3\ndb unreachable"
    assert raised.value.result is not None and raised.value.result.stdout == "partial\n"


async def test_timeout_comes_from_the_declaration(scope: ToolScope) -> None:
    with pytest.raises(PreScriptError) as raised:
        await run_pre_script(PreScript(inline="sleep 300", language="bash", timeout=0.5), scope, None)

    assert str(raised.value) == "inline pre_script failed: timed out (wall clock)"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../outside.sh", "the path must stay inside the worker folder"),
        ("scripts/missing.sh", "cannot read"),
    ],
)
async def test_bad_paths_are_refused(scope: ToolScope, path: str, message: str) -> None:
    with pytest.raises(PreScriptError) as raised:
        await run_pre_script(PreScript(path=path, language="bash"), scope, None)

    assert str(raised.value).startswith(f"pre_script {path!r}: ")
    assert message in str(raised.value)


async def test_needs_trust_level_2(scope: ToolScope) -> None:
    low = ToolScope("acme", "alice", "run-9", scope.worker_dir, trust_level=1)

    with pytest.raises(PreScriptError) as raised:
        await run_pre_script(PreScript(inline="print(1)"), low, None)

    assert str(raised.value) == "inline pre_script: pre-scripts need trust level 2; tenant acme has 1"


@function_tool(effect=Effect.READ)
async def other(name: str) -> str:
    """Another tool.

    Args:
        name: Anything.
    """
    return name


async def test_enabled_tools_limit_what_the_code_may_call(scope: ToolScope) -> None:
    """Upstream's inline form: `enabled_tools` narrows the bridge; the pipeline still decides the rest."""
    pipeline = ToolPipeline([metric, other])
    code = (
        "print(tools.call('metric', name='signups'))\n"
        "try:\n    tools.call('other', name='x')\nexcept tools.ToolError as exc:\n    print(exc.kind, exc.code)\n"
    )
    pre_script = PreScript.model_validate({"source": code, "enabled_tools": ["metric"]})

    assert await run_pre_script(pre_script, scope, pipeline) == "signups=17\ndenied denied_by_worker\n"


async def test_max_tool_calls_bounds_the_bridge(scope: ToolScope) -> None:
    code = (
        "for _ in range(3):\n    try:\n        print(tools.call('metric', name='a'))\n"
        "    except tools.ToolError as exc:\n        print(exc.code)\n"
    )
    pre_script = PreScript.model_validate({"source": code, "max_tool_calls": 2})

    assert await run_pre_script(pre_script, scope, ToolPipeline([metric])) == "a=17\na=17\ntoo_many_calls\n"


async def test_a_ref_pre_script_is_one_tool_call_through_the_pipeline(scope: ToolScope) -> None:
    """Upstream's `{tool_name, tool_input}`: no code runs, so no trust level 2 is needed."""
    low = ToolScope("acme", "alice", "run-9", scope.worker_dir, trust_level=1)
    pre_script = PreScript.model_validate({"tool_name": "metric", "tool_input": [["name", "churn"]]})

    assert await run_pre_script(pre_script, low, ToolPipeline([metric])) == "churn=17"


async def test_a_ref_pre_script_the_pipeline_refuses_fails_clearly(scope: ToolScope) -> None:
    pre_script = PreScript.model_validate({"tool_name": "nope"})

    with pytest.raises(PreScriptError) as raised:
        await run_pre_script(pre_script, scope, ToolPipeline([metric]))

    assert str(raised.value).startswith("pre_script tool 'nope' was refused: ")
