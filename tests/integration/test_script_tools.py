"""Script tools (L3): discovery from a folder, declaration errors, and runs through the pipeline."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import uvloop

from genworker.tools.base import HIDDEN_FROM_LLM, Effect, RiskLevel, ToolCall, ToolResult
from genworker.tools.builtin.execute_code import execute_code_tool
from genworker.tools.context import ToolScope
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.script_tools import ScriptTool, load_script_tools, scan_script_tools
from genworker.tools.tool import function_tool
from genworker.workspace.errors import WorkspaceError

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    """Plain asyncio, and uvloop: the loop `genworker run` serves on."""
    if request.param == "uvloop":
        return ("asyncio", {"loop_factory": uvloop.new_event_loop})
    return "asyncio"


Files = Callable[[dict[str, str]], Path]

WEEKLY_PY = """\
import json, sys
args = json.load(sys.stdin)
print(sum(args["numbers"]) * args.get("factor", 1))
"""
WEEKLY_YAML = """\
schema_version: 1
description: Sum numbers.
parameters:
  type: object
  properties:
    numbers: {type: array, items: {type: integer}}
    factor: {type: integer}
  required: [numbers]
  additionalProperties: false
effect: compute
"""
NOTIFY_SH = """\
read -r args
echo "notify got $args"
"""
NOTIFY_YAML = """\
schema_version: 1
name: notify_internal
description: Internal notification, for workflows and scripts only.
effect: external
risk_level: medium
requires_approval: false
tags: [hidden_from_llm, internal]
timeout: 5s
"""
USES_TOOLS_PY = """\
print("double:", tools.call("double", n=21))
"""
USES_TOOLS_YAML = """\
schema_version: 1
description: Calls another tool through the bridge.
effect: read
max_tool_calls: 3
"""


@function_tool(effect=Effect.READ)
async def double(n: int) -> str:
    """Double a number.

    Args:
        n: The number.
    """
    return str(2 * n)


@pytest.fixture
def files(tmp_path: Path) -> Files:
    def write(contents: dict[str, str]) -> Path:
        folder = tmp_path / "script_tools"
        folder.mkdir(exist_ok=True)
        for name, text in contents.items():
            (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
        return folder

    return write


@pytest.fixture
def tool_dir(files: Files) -> Path:
    return files(
        {
            "weekly.py": WEEKLY_PY,
            "weekly.yaml": WEEKLY_YAML,
            "notify.sh": NOTIFY_SH,
            "notify.yml": NOTIFY_YAML,
            "uses_tools.py": USES_TOOLS_PY,
            "uses_tools.yaml": USES_TOOLS_YAML,
            "README.md": "not a tool",
            "_shared.py": "ignored",
        }
    )


@pytest.fixture
def scope(tmp_path: Path) -> ToolScope:
    return ToolScope("acme", "alice", "run-1", tmp_path / "alice", trust_level=2)


def make_pipeline(tool_dir: Path) -> ToolPipeline:
    pipeline: ToolPipeline
    scripts = load_script_tools(tool_dir, executor=lambda: pipeline)
    pipeline = ToolPipeline([double, execute_code_tool(lambda: pipeline), *scripts])
    return pipeline


def completed(outcome: ToolOutcome) -> ToolResult:
    assert isinstance(outcome, ToolCompleted), outcome
    return outcome.result


def test_discovers_tools_and_their_declarations(tool_dir: Path) -> None:
    tools = {tool.spec.name: tool for tool in load_script_tools(tool_dir)}

    assert sorted(tools) == ["notify_internal", "uses_tools", "weekly"]
    weekly, notify = tools["weekly"], tools["notify_internal"]
    assert (weekly.language, weekly.script.name, weekly.spec.source) == ("python", "weekly.py", "script")
    assert (weekly.spec.effect, weekly.spec.risk_level) == (Effect.COMPUTE, RiskLevel.LOW)  # risk by effect
    assert weekly.spec.parameters["required"] == ["numbers"]
    assert (notify.language, notify.timeout_s, notify.spec.risk_level) == ("bash", 5.0, RiskLevel.MEDIUM)
    assert notify.spec.tags == frozenset({HIDDEN_FROM_LLM, "internal"})
    assert tools["uses_tools"].max_calls == 3


async def test_runs_with_arguments_on_stdin(tool_dir: Path, scope: ToolScope) -> None:
    pipeline = make_pipeline(tool_dir)

    ran = completed(await pipeline.execute(scope, ToolCall("c1", "weekly", {"numbers": [1, 2, 3], "factor": 2})))
    rejected = await pipeline.execute(scope, ToolCall("c2", "weekly", {"numbers": "1,2"}))

    assert (ran.content, ran.is_error) == ("12\n", False)
    assert not isinstance(rejected, ToolCompleted)  # the declared schema is enforced by the pipeline


async def test_hidden_tool_is_not_shown_to_the_model_but_scripts_can_call_it(tool_dir: Path, scope: ToolScope) -> None:
    pipeline = make_pipeline(tool_dir)

    shown = [spec.name for spec in pipeline.visible(scope)]
    from_model = await pipeline.execute(scope, ToolCall("c1", "notify_internal", {}))
    from_workflow = completed(await pipeline.execute(scope, ToolCall("c2", "notify_internal", {}), caller="workflow"))
    from_code = completed(
        await pipeline.execute(scope, ToolCall("c3", "execute_code", {"code": "print(tools.call('notify_internal'))"}))
    )

    assert "notify_internal" not in shown and "weekly" in shown
    assert isinstance(from_model, ToolDenied) and from_model.code == "unknown_tool"
    assert from_workflow.content == "notify got {}\n"
    assert from_code.content == "notify got {}"


async def test_a_script_tool_calls_other_tools_through_the_bridge(tool_dir: Path, scope: ToolScope) -> None:
    pipeline = make_pipeline(tool_dir)

    result = completed(await pipeline.execute(scope, ToolCall("c1", "uses_tools", {})))

    assert result.content == "double: 42\n"


async def test_a_failing_script_is_an_error_result(files: Files, scope: ToolScope) -> None:
    folder = files({"broken.sh": "echo half; echo bad >&2; exit 4\n", "broken.yaml": "schema_version: 1\n"
                    "description: Fails.\neffect: read\n"})  # fmt: skip
    (tool,) = load_script_tools(folder)

    result = completed(await ToolPipeline([tool]).execute(scope, ToolCall("c1", "broken", {})))

    assert result.is_error
    assert result.content == "half\n[stderr]\nbad\n[exit code 4]"


@pytest.mark.parametrize(
    ("contents", "file", "field", "message"),
    [
        ({"a.py": "", "a.yaml": "schema_version: 1\neffect: read\n"}, "a.yaml", "description", "Field required"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: sometimes\n"}, "a.yaml", "effect", "read"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\n"}, "a.yaml", "effect", "Field required"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: read\ncolour: red\n"}, "a.yaml",
         "colour", "Extra inputs"),
        ({"a.py": "", "a.yaml": "schema_version: 2\ndescription: d\neffect: read\n"}, "a.yaml", "schema_version",
         "unknown schema_version 2"),
        ({"a.py": "", "a.yaml": "description: d\neffect: read\n"}, "a.yaml", "schema_version", "Field required"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: read\nname: 'bad name'\n"}, "a.yaml",
         "name", "must be 1-64 letters"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: read\nparameters: {type: string}\n"},
         "a.yaml", "parameters", "type: object"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: read\n"
          "parameters: {type: object, properties: 5}\n"}, "a.yaml", "parameters", "invalid parameters schema"),
        ({"a.py": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: read\ntimeout: soon\n"}, "a.yaml",
         "timeout", "duration"),
        ({"a.py": "", "a.yaml": "description: [unclosed\n"}, "a.yaml", "", "invalid YAML"),
        ({"a.py": "", "a.yaml": "- a list\n"}, "a.yaml", "", "must be a YAML mapping"),
        ({"a.py": ""}, "a.py", "", "needs a declaration a.yaml"),
        ({"a.yaml": "schema_version: 1\ndescription: d\neffect: read\n"}, "a.yaml", "script", "no script a.py"),
        ({"a.py": "", "a.sh": "", "a.yaml": "schema_version: 1\ndescription: d\neffect: read\n"}, "a.yaml",
         "script", "both a.py and a.sh"),
    ],
)  # fmt: skip
def test_bad_declarations_name_file_and_field(
    files: Files, contents: dict[str, str], file: str, field: str, message: str
) -> None:
    folder = files({**contents, "good.py": "print(1)\n", "good.yaml": "schema_version: 1\ndescription: Ok.\n"
                    "effect: read\n"})  # fmt: skip

    scan = scan_script_tools(folder)

    assert [tool.spec.name for tool in scan.tools] == ["good"]  # one bad file spares the others
    (issue,) = scan.issues
    assert (Path(issue.file).name, issue.field) == (file, field)
    assert message in issue.message
    with pytest.raises(WorkspaceError) as raised:
        load_script_tools(folder)
    assert file in str(raised.value) and message in str(raised.value)


def test_tool_names_are_unique(files: Files) -> None:
    declaration = "schema_version: 1\nname: same\ndescription: d\neffect: read\n"
    folder = files({"a.py": "", "a.yaml": declaration, "b.sh": "", "b.yaml": declaration})

    scan = scan_script_tools(folder)

    assert [tool.script.name for tool in scan.tools] == ["a.py"]
    (issue,) = scan.issues
    assert (Path(issue.file).name, issue.field) == ("b.sh", "name")
    assert issue.message == f"tool name 'same' is also used by {folder / 'a.py'}"


def test_a_missing_folder_is_an_issue(tmp_path: Path) -> None:
    scan = scan_script_tools(tmp_path / "nope")

    assert scan.tools == () and "not a directory" in scan.issues[0].message


def test_script_tools_satisfy_the_tool_protocol(tool_dir: Path) -> None:
    tool: ScriptTool = load_script_tools(tool_dir)[0]

    ToolPipeline([tool])  # registers: the parameters schema compiles
