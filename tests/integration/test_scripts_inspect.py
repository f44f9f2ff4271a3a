"""scripts/inspect_workspace.py on copies of the compat corpus and the demo: what the server would
load, per tenant and worker, and how many upstream spellings `check --explain` maps."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "inspect_workspace.py"
CORPUS = ROOT / "tests" / "fixtures" / "compat"


def inspect(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--workspace", str(workspace), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


def corpus(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(CORPUS / name, tmp_path / name))


def by_id(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {item[key]: item for item in items}


def test_upstream_full_as_json(tmp_path: Path) -> None:
    workspace = corpus(tmp_path, "upstream_full")
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}
    result = inspect(workspace, "--json")
    assert result.returncode == 0, result.stderr
    assert {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()} == before  # read-only
    summary = json.loads(result.stdout)
    assert summary["errors"] == []
    (acme,) = summary["tenants"]
    assert (acme["tenant_id"], acme["trust_level"], acme["default_worker"]) == ("acme", 2, "analyst")
    assert acme["skills"] == ["incident-planner", "triage-graph"]
    workers = by_id(acme["workers"], "worker_id")
    assert {k: w["mode"] for k, w in workers.items()} == {
        "analyst": "personal",
        "support-desk": "service",
        "teammate": "team_member",
    }
    analyst = workers["analyst"]
    duties = by_id(analyst["duties"], "duty_id")
    assert duties["weekly-report"] | {"triggers": []} == {
        "duty_id": "weekly-report",
        "title": "Weekly quality report",
        "status": "closed",
        "triggers": [],
        "depth": "quick",
        "posture": "execute",
        "skill": None,
    }
    assert duties["daily-quality-watch"]["triggers"].count("condition") == 2
    goals = by_id(analyst["goals"], "goal_id")
    assert goals["legacy-dashboard-migration"]["status"] == "archived"  # upstream's abandoned
    channels = {c["key"]: (c["connection_mode"], c["webhook"]) for c in analyst["channels"]}
    assert channels["slack-2"] == ("webhook", "/api/v1/channel/acme~analyst~slack-2/webhook")
    assert channels["email"][0] == "polling"  # upstream's poll
    assert [s["source_type"] for s in analyst["sensors"]] == [
        "email",
        "workspace_file",
        "git",
        "webhook",
        "feishu_folder",
    ]
    spellings = analyst["upstream_spellings"]
    assert spellings["mapped"] > 20 and spellings["ignored"] > 0
    assert ["mapped: identities[].channel_type: channel_type -> channel", 5] in spellings["most_common"]


def test_the_demo_as_text(demo_workspace: Path) -> None:
    result = inspect(demo_workspace)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"workspace {demo_workspace.resolve()}"
    assert lines[1].startswith('tenant demo "') and ": trust level 2, default worker assistant" in lines[1]
    assert "  worker assistant " in "\n".join(lines)
    assert any(
        line == "    duty inbox-triage: active; event, schedule; depth standard, posture draft; skill inbox-triage"
        for line in lines
    )
    assert lines[-1].startswith("the workspace loads (0 warnings); each file's details: genworker check --explain")


def test_a_workspace_with_errors_exits_1_and_names_the_failed_worker(tmp_path: Path) -> None:
    workspace = corpus(tmp_path, "upstream_lenient")
    persona = workspace / "tenants/lenient/workers/legacy/PERSONA.md"
    persona.write_text(
        persona.read_text(encoding="utf-8").replace("worker_id: legacy", "worker_id: other"), encoding="utf-8"
    )
    result = inspect(workspace)
    assert result.returncode == 1
    assert "  worker legacy: FAILED (1 error; first: " in result.stdout
    assert "must equal the folder name 'legacy'" in result.stdout
    assert "the workspace has 1 error" in result.stdout.splitlines()[-1]


def test_a_missing_folder_is_said(tmp_path: Path) -> None:
    result = inspect(tmp_path / "nope")
    assert (result.returncode, result.stderr) == (1, f"inspect: workspace folder {tmp_path / 'nope'} does not exist\n")
