"""scripts/release_check.sh: its steps run for real (the demo and the compat corpus through
`genworker check`, pytest with the arguments after --); the first failing step stops it by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "release_check.sh"
VENV = Path(sys.executable).parent.parent


def release_check(*args: str, demo: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VENV": str(VENV)}
    env.pop("DEMO_WORKSPACE", None)
    if demo is not None:
        env["DEMO_WORKSPACE"] = str(demo)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=300,
        check=False,
    )


def test_demo_and_compat_steps_pass(demo_workspace: Path) -> None:
    result = release_check("--only", "demo,compat", demo=demo_workspace)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "== demo" and lines[1].startswith("OK: 1 tenant, 3 workers")
    compat = [line for line in lines if line.startswith("tests/fixtures/compat/")]
    assert [line.split(":")[0] for line in compat] == [
        "tests/fixtures/compat/seed_style",
        "tests/fixtures/compat/upstream_full",
        "tests/fixtures/compat/upstream_lenient",
    ]
    assert all(": OK: " in line for line in compat)
    assert lines[-1] == "release check OK: demo compat"


def test_a_demo_warning_fails_the_demo_step_and_stops_there(demo_workspace: Path) -> None:
    persona = demo_workspace / "tenants/demo/workers/assistant/PERSONA.md"
    persona.write_text(
        persona.read_text(encoding="utf-8").replace("mode:", "favourite_colour: blue\nmode:", 1), encoding="utf-8"
    )
    result = release_check("--only", "demo,compat", demo=demo_workspace)
    assert result.returncode == 1
    assert "favourite_colour" in result.stdout
    assert "== compat" not in result.stdout  # stopped at the first failure
    assert result.stderr.splitlines()[-1] == "release check FAILED at: demo"


def test_the_suite_step_passes_its_arguments_to_pytest() -> None:
    result = release_check("--only", "suite", "--", "-q", "-p", "no:cacheprovider", "tests/unit/test_loader_worker.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and result.stdout.splitlines()[-1] == "release check OK: suite"


def test_an_unknown_step_is_bad_usage() -> None:
    result = release_check("--only", "lint,deploy")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "release_check: unknown step 'deploy' (steps: lint types demo compat suite)\n"
