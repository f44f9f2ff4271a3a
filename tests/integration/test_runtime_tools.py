"""The runtime wires per-worker tools: builtin tools, MCP servers from PERSONA.md / TENANT.json,
effect overrides into the scope, and MCP statuses in the debug endpoint."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.settings import load_settings

TOKEN = {"Authorization": "Bearer t0ken"}


def test_worker_mcp_servers_start_with_the_runtime(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    command = shutil.which("mcp-server-time") or str(Path(__import__("sys").executable).with_name("mcp-server-time"))
    persona = (
        "---\nidentity: {name: Alice, worker_id: alice}\n"
        f"mcp_servers:\n  - name: time\n    command: {command}\n    args: [--local-timezone, UTC]\n"
        "tool_effect_overrides:\n  time__get_current_time: {effect: read, risk_level: low}\n"
        "---\nHi\n"
    )
    root = small_workspace(extra={"tenants/acme/workers/alice/PERSONA.md": persona})
    (tmp_path / "configs").mkdir()
    settings = load_settings(
        tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_ADMIN_TOKEN": "t0ken"}, workspace=root
    )
    with TestClient(create_app(settings)) as client:
        debug = client.get("/api/v1/debug/runtime", headers=TOKEN).json()
        status = debug["components"]["mcp:time@acme/alice"]
        assert status["status"] == "ready", status
        assert "time__get_current_time" in status["details"]["tools"]
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        alice = runtime.registry.worker("acme", "alice")
        tenant = runtime.registry.tenant("acme").tenant
        scope = runtime.tools.scope(tenant, alice, "r1", posture="proposal_only")
        visible = {s.name: s for s in runtime.tools.pipeline_for(alice).visible(scope)}
        # the override declares it read-only, so even a proposal-only run may use it
        assert visible["time__get_current_time"].effect == "read"
        bob = runtime.registry.worker("acme", "bob")
        assert "time__get_current_time" not in {s.name for s in runtime.tools.pipeline_for(bob).visible(scope)}


SKILL = """---
name: {name}
description: A skill that names tools.
metadata:
  genworker:
    tools: [{tools}]
    strategy:
      mode: deterministic
      steps:
        - {{id: fetch, kind: tool, tool: {step_tool}}}
---
Body.
"""


def test_skills_naming_tools_nothing_provides_are_one_warning_per_worker_and_change(
    tmp_path: Path, small_workspace: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The demo analyst's weekly report named `metrics_query`, which nothing provided: its runs
    failed at that step, and `genworker check` and the logs said nothing."""
    command = shutil.which("mcp-server-time") or str(Path(__import__("sys").executable).with_name("mcp-server-time"))
    bob = (
        "---\nidentity: {name: Bob, worker_id: bob}\n"
        f"mcp_servers:\n  - name: time\n    command: {command}\n    args: [--local-timezone, UTC]\n---\nHi\n"
    )
    root = small_workspace(
        extra={
            "tenants/acme/workers/alice/skills/report/SKILL.md": SKILL.format(
                name="report", tools="metrics_query, file_read", step_tool="chart_render"
            ),
            "tenants/acme/workers/alice/skills/notes/SKILL.md": SKILL.format(
                name="notes", tools="file_read", step_tool="file_list"
            ),
            "tenants/acme/workers/bob/PERSONA.md": bob,
            "tenants/acme/workers/bob/skills/clock/SKILL.md": SKILL.format(
                name="clock", tools="time__get_current_time", step_tool="time__get_current_time"
            ),
        }
    )
    (tmp_path / "configs").mkdir()
    settings = load_settings(tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=root)
    caplog.set_level("WARNING", logger="genworker")
    with TestClient(create_app(settings)) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        alice, bob_worker = runtime.registry.worker("acme", "alice"), runtime.registry.worker("acme", "bob")
        assert runtime.tools.missing_tools(alice) == {"report": ("metrics_query", "chart_render")}
        assert runtime.tools.missing_tools(bob_worker) == {}  # its MCP server provides the tool
        warned = [r.getMessage() for r in caplog.records if "skills name tools" in r.getMessage()]
        assert (
            len(warned) == 1
            and warned[0].startswith("acme/alice: ")
            and "report: metrics_query, chart_render" in warned[0]
        )

        def warnings_after_start() -> int:  # as after any reload
            tenant = runtime.registry.tenant("acme").tenant
            client.portal.call(runtime.tools.start, [(tenant, alice), (tenant, bob_worker)])  # type: ignore[union-attr]
            return len([r for r in caplog.records if "skills name tools" in r.getMessage()])

        assert warnings_after_start() == 1  # nothing changed: said once
        pipeline = runtime.tools.pipeline_for(alice)
        for name in ("metrics_query", "chart_render"):  # as an MCP server adding them would
            pipeline.register(
                replace(pipeline.get("file_read"), spec=replace(pipeline.get("file_read").spec, name=name))
            )
        assert warnings_after_start() == 1 and runtime.tools.missing_tools(alice) == {}
        pipeline.unregister("chart_render")
        assert warnings_after_start() == 2 and "report: chart_render" in caplog.records[-1].getMessage()
