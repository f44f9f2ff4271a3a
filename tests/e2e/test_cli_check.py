"""`genworker check`: problems grouped by file, exit codes, one-line summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.cli import main


def test_clean_workspace_prints_one_summary_line(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--workspace", str(small_workspace())]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("OK: 1 tenant, 2 workers, 0 duties, 0 goals")


def test_problems_are_grouped_by_file_and_fail(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = small_workspace(
        extra={
            "tenants/acme/workers/alice/duties/a.md": (
                "---\nduty_id: a\ntitle: A\ntriggers:\n  - {id: t, type: schedule, cron: 'nope'}\n---\nact\n"
            ),
            "tenants/acme/workers/alice/duties/b.md": "---\nduty_id: b\ntitle: B\ncolour: red\n---\nact\n",
        }
    )
    assert main(["check", "--workspace", str(root)]) == 1
    out = capsys.readouterr().out
    assert "tenants/acme/workers/alice/duties/a.md\n  error: line 5: triggers[0].cron:" in out
    assert "tenants/acme/workers/alice/duties/b.md\n  warning: line 4: colour: unknown field" in out
    assert (
        out.strip().splitlines()[-1]
        == "FAILED: 1 error, 1 warning (1 tenant, 1 worker, 0 duties, 0 goals, 2 skills; 1 worker failed)"
    )


def test_a_sensor_whose_filter_does_not_parse_is_a_warning_at_its_line(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The worker loads and its other sensors run, but this one would start `degraded` and never poll:
    check says so, at the filter's line, rather than leaving it to /api/v1/debug/runtime."""
    persona = (
        "---\nidentity: {name: Alice, worker_id: alice}\n"
        "sensor_configs:\n"
        "  - {source_type: webhook, sensor_id: hook}\n"
        "  - source_type: git\n"
        "    sensor_id: app-repo\n"
        "    filter:\n"
        "      branch: main\n"
        "      max_commits: 0\n"
        "---\nYou are Alice.\n"
    )
    root = small_workspace(extra={"tenants/acme/workers/alice/PERSONA.md": persona})
    assert main(["check", "--workspace", str(root)]) == 0
    out = capsys.readouterr().out
    assert (
        "tenants/acme/workers/alice/PERSONA.md\n  warning: line 8: sensor_configs[1].filter: "
        "sensor 'app-repo' (git): filter.max_commits: Input should be greater than or equal to 1 "
        "(this sensor will not run)"
    ) in out
    assert out.strip().splitlines()[-1].endswith("(1 warning)")


def test_json_output(small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    root = small_workspace(extra={"tenants/acme/TENANT.json": '{"tenant_id": "other"}'})
    assert main(["check", "--workspace", str(root), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["issues"][0] == {
        "severity": "error",
        "file": "tenants/acme/TENANT.json",
        "field": "tenant_id",
        "line": 1,
        "message": "tenant_id 'other' must equal the folder name 'acme'",
    }


def test_missing_workspace_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--workspace", str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err.strip() == f"genworker: workspace folder {tmp_path / 'nope'} does not exist"


def test_console_script_checks_the_demo_workspace(tmp_path: Path, demo_workspace: Path) -> None:
    script = Path(sys.executable).with_name("genworker")
    env = {**os.environ, "GENWORKER_CONFIG_DIR": str(tmp_path)}
    result = subprocess.run(
        [str(script), "check", "--workspace", str(demo_workspace)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK: 1 tenant, ")
    assert "warning" not in result.stdout


def test_explain_says_per_file_what_was_understood_mapped_and_unknown(
    small_workspace: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue #22: a workspace written for upstream genworker, and what the loader made of each file."""
    root = small_workspace(
        tenants={"acme": ["alice"]},
        extra={
            "tenants/acme/TENANT.json": '{"name": "Acme", "trust_level": 2}',
            "tenants/acme/workers/alice/PERSONA.md": (
                "---\nidentity: {name: Alice, worker_id: alice}\nmode: personal\ncolour: red\n---\nYou are Alice.\n"
            ),
        },
    )
    assert main(["check", "--workspace", str(root)]) == 0
    plain = capsys.readouterr().out
    assert "understood" not in plain and "mapped" not in plain
    assert main(["check", "--workspace", str(root), "--explain"]) == 0
    out = capsys.readouterr().out
    assert (
        "tenants/acme/TENANT.json\n"
        "  understood: name, trust_level\n"
        "  mapped: tenant_id: (absent) -> 'acme', the folder name\n"
    ) in out
    assert (
        "tenants/acme/workers/alice/PERSONA.md\n"
        "  understood: identity, mode\n"
        "  warning: line 4: colour: unknown field (ignored)\n"
    ) in out
    assert out.strip().splitlines()[-1].endswith("(1 warning)")
    assert main(["check", "--workspace", str(root), "--explain", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {
        "severity": "note",
        "file": "tenants/acme/TENANT.json",
        "field": "tenant_id",
        "line": None,
        "message": "mapped: (absent) -> 'acme', the folder name",
    } in report["notes"]
    assert all(i["severity"] != "note" for i in report["issues"])
