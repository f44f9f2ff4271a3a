"""LiteLLM and the vendors' SDKs are imported when something uses them, never with genworker's modules:
importing the app or the runtime does not load them, and CLI commands that make no model call never do
(issue #28: LiteLLM alone was 60 % of a server start-up). Each check runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = (
    "litellm",
    "openai",
    "tiktoken",
    "lark_oapi",
    "slack_sdk",
    "dingtalk_stream",
    "wechatpy",
    "langgraph",
    "torch",
    "sentence_transformers",
    "schemathesis",
    "hypothesis",
    "playwright",
)
# Runs `genworker ARGS` as the console script does, then writes the heavy modules it imported.
CLI = (
    "import atexit, json, os, sys\n"
    "atexit.register(lambda: open(os.environ['HEAVY_OUT'], 'w', encoding='utf-8').write(json.dumps("
    f"sorted(m for m in {HEAVY!r} if m in sys.modules))))\n"
    "from genworker.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once the socket is closed


def heavy_after_import(*modules: str) -> list[str]:
    found = f"sorted(m for m in {HEAVY!r} if m in sys.modules)"
    code = f"import json, sys\nimport {', '.join(modules)}\nprint(json.dumps({found}))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", timeout=300, check=True
    )
    found: list[str] = json.loads(result.stdout)
    return found


def test_importing_the_app_and_the_runtime_loads_no_model_layer_or_vendor_sdk() -> None:
    modules = (
        "genworker.api.app",
        "genworker.runtime.composition",
        "genworker.llm.client",
        "genworker.worker.router",
        "genworker.channels.ingest",
        "genworker.channels.longconn",
        "genworker.cli.serve",
    )
    assert heavy_after_import(*modules) == []


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--workspace", "{workspace}"],
        ["check", "--workspace", "{workspace}", "--json", "--explain"],
        ["keys", "create", "--tenant", "demo"],
        ["keys", "list", "--tenant", "demo"],
        ["memory", "reindex", "--all", "--workspace", "{workspace}", "--json"],
        ["chat", "assistant", "-m", "hello", "--url", "{url}", "--api-key", "k"],
        ["task", "assistant", "summarise", "--url", "{url}", "--api-key", "k"],
        ["runs", "list", "assistant", "--url", "{url}", "--api-key", "k"],
        ["replies", "list", "assistant", "--url", "{url}", "--api-key", "k"],
        ["--help"],
    ],
    ids=lambda args: " ".join(a for a in args if not a.startswith("{"))[:40],
)
def test_commands_that_make_no_model_call_never_import_litellm(
    args: list[str], tmp_path: Path, demo_workspace: Path
) -> None:
    out = tmp_path / "heavy.json"
    (tmp_path / "configs").mkdir()
    url = f"http://127.0.0.1:{closed_port()}"  # remote commands fail to connect: what they import is what counts
    argv = [a.format(workspace=demo_workspace, url=url) for a in args]
    env = {
        **os.environ,
        "HEAVY_OUT": str(out),
        "GENWORKER_WORKSPACE": str(demo_workspace),
        "GENWORKER_CONFIG_DIR": str(tmp_path / "configs"),
    }
    result = subprocess.run(
        [sys.executable, "-c", CLI, *argv], capture_output=True, text=True, encoding="utf-8", env=env, timeout=300
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert json.loads(out.read_text(encoding="utf-8")) == [], result.stdout + result.stderr


def test_a_runtime_without_a_model_never_imports_litellm(tmp_path: Path, demo_workspace: Path) -> None:
    """Started and asked for readiness: the workspace, the tokenizer (tiktoken) and every component, but
    no model layer."""
    code = (
        "import json, sys\n"
        "from fastapi.testclient import TestClient\n"
        "from genworker.api.app import create_app\n"
        "with TestClient(create_app()) as client:\n"
        "    codes = [r['code'] for r in client.get('/readiness').json()['reasons']]\n"
        f"print(json.dumps([codes, sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n"
    )
    (tmp_path / "configs").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENWORKER_", "REDIS_"))}
    env |= {"GENWORKER_WORKSPACE": str(demo_workspace), "GENWORKER_CONFIG_DIR": str(tmp_path / "configs")}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [["model_not_configured"], ["tiktoken"]]  # counting tokens
