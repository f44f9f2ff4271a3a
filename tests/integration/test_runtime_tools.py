"""The runtime wires per-worker tools: builtin tools, MCP servers from PERSONA.md / TENANT.json,
effect overrides into the scope, and MCP statuses in the debug endpoint."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

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
